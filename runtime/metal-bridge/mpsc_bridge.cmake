# mpsc_bridge.cmake: the configure-time probes of the Metal bridge project (CMakeLists.txt includes
# this file; test/metal_bridge.test.ts runs the functions with `cmake -P` and a fake xcrun).

# mpsc_probe_metal_toolchain(<out_var> <work_dir>): sets <out_var> to TRUE when the Metal shader
# compiler really works, i.e. it compiles a one-line kernel to .air and links that into a
# .metallib. Finding the `metal` binary (`xcrun -f metal`) is not enough: Xcode 26 ships a stub
# that fails with "missing Metal Toolchain" until the optional component is downloaded. On
# FALSE, <out_var>_WHY holds the compiler's message.
function(mpsc_probe_metal_toolchain out_var work_dir)
  file(MAKE_DIRECTORY "${work_dir}")
  set(src "${work_dir}/mpsc_probe.metal")
  file(WRITE "${src}" "kernel void mpsc_probe(device float* x [[buffer(0)]]) { x[0] = 1.0f; }\n")
  execute_process(COMMAND xcrun -sdk macosx metal -std=metal3.0 -c "${src}" -o "${work_dir}/mpsc_probe.air"
                  RESULT_VARIABLE rc OUTPUT_VARIABLE log ERROR_VARIABLE log)
  if(rc EQUAL 0 AND EXISTS "${work_dir}/mpsc_probe.air")
    execute_process(COMMAND xcrun -sdk macosx metallib "${work_dir}/mpsc_probe.air" -o "${work_dir}/mpsc_probe.metallib"
                    RESULT_VARIABLE rc OUTPUT_VARIABLE log ERROR_VARIABLE log)
    if(rc EQUAL 0 AND EXISTS "${work_dir}/mpsc_probe.metallib")
      set(${out_var} TRUE PARENT_SCOPE)
      return()
    endif()
  endif()
  string(STRIP "${rc} ${log}" why)
  set(${out_var} FALSE PARENT_SCOPE)
  set(${out_var}_WHY "${why}" PARENT_SCOPE)
endfunction()

# mpsc_find_napi_include(<out_var> <project_dir>): node-addon-api's include folder (the one with
# napi.h): $MPSC_NAPI_INC, else MPSC_NAPI_INC_RECORDED (written by `mpsc build` into
# mpsc_paths.cmake: the copy mpsc itself uses, so a project outside any node_modules tree builds),
# else what `node` resolves from <project_dir>. A fatal error names the fix when none has napi.h.
function(mpsc_find_napi_include out_var project_dir)
  set(candidates "")
  if(DEFINED ENV{MPSC_NAPI_INC})
    list(APPEND candidates "$ENV{MPSC_NAPI_INC}")
  endif()
  if(MPSC_NAPI_INC_RECORDED)
    list(APPEND candidates "${MPSC_NAPI_INC_RECORDED}")
  endif()
  execute_process(COMMAND node -p "require('node-addon-api').include_dir" OUTPUT_VARIABLE resolved
                  OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET WORKING_DIRECTORY "${project_dir}")
  if(resolved)
    list(APPEND candidates "${resolved}")
  endif()
  foreach(dir IN LISTS candidates)
    string(REPLACE "\"" "" dir "${dir}")
    if(EXISTS "${dir}/napi.h")
      set(${out_var} "${dir}" PARENT_SCOPE)
      return()
    endif()
  endforeach()
  message(FATAL_ERROR "cannot find node-addon-api's napi.h (tried: ${candidates}). Regenerate this project with "
                      "`mpsc build --target metal`, or set MPSC_NAPI_INC to the folder of node-addon-api (npm i node-addon-api)")
endfunction()
