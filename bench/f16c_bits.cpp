// Checks that g++'s _Float16 conversions give the same bits in software (libgcc __extendhfsf2 /
// __truncsfhf2) and with F16C instructions (-mf16c, what runtime/metal-emu/session.ts emuArchFlags
// adds where the CPU has it). Prints a checksum over: every half -> float, every 7th float bit
// pattern -> half, 44 million double patterns -> half, and 22 million half a * b + a; the two builds
// must print the same number:
//   g++ -O2 bench/f16c_bits.cpp -o /tmp/soft && g++ -O2 -mf16c bench/f16c_bits.cpp -o /tmp/f16c
//   /tmp/soft; /tmp/f16c
#include <cstdint>
#include <cstdio>
#include <cstring>

__attribute__((noinline)) static float h2f(_Float16 h) { return (float)h; }
__attribute__((noinline)) static _Float16 f2h(float f) { return (_Float16)f; }
__attribute__((noinline)) static _Float16 d2h(double d) { return (_Float16)d; }
__attribute__((noinline)) static _Float16 mul_add(_Float16 a, _Float16 b) { return a * b + a; }

template <class To, class From>
static To as(From x) {  // the same bits as another type of that size
  static_assert(sizeof(To) == sizeof(From), "sizes differ");
  To t;
  std::memcpy(&t, &x, sizeof t);
  return t;
}

int main() {
  uint64_t s = 1469598103934665603ull;  // FNV-1a over the results' bits
  auto mix = [&](uint32_t v) { s = (s ^ v) * 1099511628211ull; };
  for (uint32_t i = 0; i < 65536; i++) mix(as<uint32_t>(h2f(as<_Float16>(uint16_t(i)))));
  for (uint64_t i = 0; i < (1ull << 32); i += 7) mix(as<uint16_t>(f2h(as<float>(uint32_t(i)))));
  for (uint64_t i = 0; i < (1ull << 32); i += 97) mix(as<uint16_t>(d2h(as<double>((i << 32) ^ (i * 0x9E3779B97F4A7C15ull >> 20)))));
  for (uint32_t i = 0; i < 65536; i += 3)
    for (uint32_t j = 0; j < 65536; j += 251) mix(as<uint16_t>(mul_add(as<_Float16>(uint16_t(i)), as<_Float16>(uint16_t(j)))));
  std::printf("%016llx\n", (unsigned long long)s);
  return 0;
}
