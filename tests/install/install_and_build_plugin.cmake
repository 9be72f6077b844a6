# ctest install_and_build_my_model (cmake -P): the relocatable install.
#   1. cmake --install BB_BINARY_DIR --prefix WORK_DIR/prefix, then the prefix is
#      moved, so nothing may point back to where it was installed or built;
#   2. examples/my_model configured as a project of its own against the moved
#      prefix alone (find_package(bumblebee)), built, and its train_my_model run;
#   3. the installed bb-bench loads the plugin built there (plugin=...).
# Inputs: -DBB_BINARY_DIR= -DBB_SOURCE_DIR= -DWORK_DIR=
foreach(var BB_BINARY_DIR BB_SOURCE_DIR WORK_DIR)
  if(NOT ${var})
    message(FATAL_ERROR "install_and_build_plugin.cmake needs -D${var}=...")
  endif()
endforeach()

function(run what)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "${what} failed (${rc}):\n${out}\n${err}")
  endif()
  set(last_output "${out}" PARENT_SCOPE)
endfunction()

file(REMOVE_RECURSE ${WORK_DIR})
run("cmake --install" ${CMAKE_COMMAND} --install ${BB_BINARY_DIR} --prefix ${WORK_DIR}/prefix)
file(RENAME ${WORK_DIR}/prefix ${WORK_DIR}/moved)
set(prefix ${WORK_DIR}/moved)
foreach(f lib/libbumblebee.so lib/cmake/bumblebee/bumblebeeConfig.cmake lib/cmake/bumblebee/bumblebeeConfigVersion.cmake
          include/bumblebee/runtime/runtime.h include/bumblebee/core/tensor.h bin/bb-bench bin/bb-train)
  if(NOT EXISTS ${prefix}/${f})
    message(FATAL_ERROR "the install has no ${f}")
  endif()
endforeach()

set(launcher "")
find_program(ccache ccache)
if(ccache)
  set(launcher -DCMAKE_CXX_COMPILER_LAUNCHER=${ccache})
endif()
run("configuring examples/my_model against the install"
    ${CMAKE_COMMAND} -S ${BB_SOURCE_DIR}/examples/my_model -B ${WORK_DIR}/my_model -G Ninja
    -DCMAKE_BUILD_TYPE=Release -DCMAKE_PREFIX_PATH=${prefix} ${launcher})
run("building examples/my_model" ${CMAKE_COMMAND} --build ${WORK_DIR}/my_model -j1)

set(hf ${BB_SOURCE_DIR}/examples/my_model/hf)
set(plugin ${WORK_DIR}/my_model/libmy_model.so)
run("train_my_model" ${WORK_DIR}/my_model/train_my_model ${hf} ${plugin})
message(STATUS "${last_output}")
run("the installed bb-bench with plugin=" ${prefix}/bin/bb-bench plugin=${plugin} hf_path=${hf}
    backend.model_name=my_llama bench.seq_len=16 bench.steps=1 bench.warmup=0)
string(FIND "${last_output}" "\"model\":\"my_llama\"" found)
if(found EQUAL -1)
  message(FATAL_ERROR "the installed bb-bench did not run my_llama:\n${last_output}")
endif()
message(STATUS "installed bb-bench ran my_llama from ${plugin}")
