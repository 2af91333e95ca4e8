// mpsc_metal_caps.h: which Metal GPUs run a program's `bfloat` buffers (a bf16 train precision,
// issue 15). Pure C++ (no Metal types), so the same rule serves the bridge (mpsc_metal_bridge.mm
// fills MpscMetalGpu from the MTLDevice) and the emulator's model of a GPU (MPSC_METAL_EMU_GPU,
// compiler/codegen-metal/templates/emu_model.hbs), and is unit-tested on Linux
// (test/metal_precision.test.ts).
//
// The rule: `bfloat` is MSL 3.1 (MTLLanguageVersion3_1: macOS 14 / iOS 17 or later), and the GPU
// must be an Apple6-or-later or a Metal3 GPU (the families on which MSL 3.1 compiles bfloat; the
// rule llama.cpp's Metal backend uses too). `half` runs on every Metal GPU. Not verified on
// hardware here: no Mac was available (docs/metal.md, "What still needs a Mac").
// The reason starts with MPSC_UNSUPPORTED_GPU, which the sessions turn into a UserError (exit 1;
// runtime/metal-bridge/gpu_caps.ts).
#ifndef MPSC_METAL_CAPS_H
#define MPSC_METAL_CAPS_H

#include <cstddef>
#include <cstdio>

#define MPSC_UNSUPPORTED_GPU "unsupported GPU: "

struct MpscMetalGpu {
  const char* name;  // the device name, for the message
  bool apple6;       // supportsFamily:MTLGPUFamilyApple6 (A13 and later, every Apple silicon Mac)
  bool metal3;       // supportsFamily:MTLGPUFamilyMetal3
  bool msl31;        // the OS compiles MSL 3.1 (macOS 14 or later, and an SDK that has it)
};

// nullptr when the GPU runs bfloat buffers; else the reason, written into buf (n bytes)
inline const char* mpsc_bfloat_unsupported(const MpscMetalGpu& g, char* buf, size_t n) {
  if (g.msl31 && (g.apple6 || g.metal3)) return nullptr;
  const char* why = !g.msl31 ? "this system does not compile MSL 3.1 (macOS 14 or later is needed)"
                             : "the GPU is neither Apple6-or-later nor Metal3";
  std::snprintf(buf, n,
                MPSC_UNSUPPORTED_GPU "precision \"bf16\" needs Metal's bfloat type, and %s (GPU: %s)\n"
                "  help: train with --precision fp16 (half runs on every Metal GPU), or use --device cpu",
                why, g.name ? g.name : "unknown");
  return buf;
}

#endif
