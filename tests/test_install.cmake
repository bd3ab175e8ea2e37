# The installed package, used the three ways a user would: `cmake --install` into a scratch prefix,
# then a separate CMake project (tests/install_consumer) built against it with find_package(aotk) and
# both imported targets, and the same program compiled with plain cc and pkg-config. Each program
# runs and checks the public API answers without a GPU.
#
# Run by ctest as `cmake -D... -P test_install.cmake`. Inputs (all required):
#   AOTK_BUILD_DIR        the configured and built aotk tree to install from
#   AOTK_SOURCE_DIR       aotk's sources (for tests/install_consumer)
#   AOTK_SCRATCH_DIR      removed and recreated: holds the prefix and the consumer's build
#   AOTK_VERSION          the version the package must report
#   AOTK_INSTALL_LIBDIR, AOTK_INSTALL_INCLUDEDIR, AOTK_INSTALL_BINDIR
#                         GNUInstallDirs' choices in the build (relative to the prefix)
#   AOTK_C_COMPILER, AOTK_GENERATOR, AOTK_MAKE_PROGRAM
#                         what the build used, so that the consumer is built the same way
foreach(input AOTK_BUILD_DIR AOTK_SOURCE_DIR AOTK_SCRATCH_DIR AOTK_VERSION AOTK_INSTALL_LIBDIR
        AOTK_INSTALL_INCLUDEDIR AOTK_INSTALL_BINDIR AOTK_C_COMPILER AOTK_GENERATOR AOTK_MAKE_PROGRAM)
  if("${${input}}" STREQUAL "")
    message(FATAL_ERROR "test_install.cmake: -D${input}=... is required")
  endif()
endforeach()

set(prefix "${AOTK_SCRATCH_DIR}/prefix")
set(consumer_build "${AOTK_SCRATCH_DIR}/consumer-build")
set(libdir "${prefix}/${AOTK_INSTALL_LIBDIR}")

# Runs a command, echoing it first; any failure ends the test with the command's output.
function(run_step description)
  list(JOIN ARGN " " command_line)
  message(STATUS "${description}")
  message(STATUS "  $ ${command_line}")
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE result OUTPUT_VARIABLE output ERROR_VARIABLE output)
  if(NOT result EQUAL 0)
    message(FATAL_ERROR "${description}: failed (${result}):\n${output}")
  endif()
  set(step_output "${output}" PARENT_SCOPE)
endfunction()

# Runs one of the built programs and shows what it printed.
function(run_consumer description)
  run_step("${description}" ${ARGN})
  message(STATUS "${step_output}")
endfunction()

# With ldd at hand, checks where the program's libaotk comes from: `expected` is a path prefix the
# library must resolve under, or NONE for a program that must not load libaotk.so at all.
function(check_loaded_aotk program expected)
  find_program(LDD ldd)
  if(NOT LDD)
    message(STATUS "  (no ldd: not checking which libaotk ${program} loads)")
    return()
  endif()
  execute_process(COMMAND ${LDD} ${program} RESULT_VARIABLE result OUTPUT_VARIABLE output ERROR_VARIABLE output)
  string(REGEX MATCH "libaotk\\.so[^\n]*" line "${output}")
  if(expected STREQUAL "NONE")
    if(line)
      message(FATAL_ERROR "${program} was linked against the static library but needs ${line}")
    endif()
    message(STATUS "  ldd: ${program} does not need libaotk.so")
  else()
    string(FIND "${line}" "=> ${expected}/" at)
    if(at EQUAL -1)
      message(FATAL_ERROR "${program} must load libaotk.so from ${expected}, ldd says:\n${output}")
    endif()
    message(STATUS "  ldd: ${line}")
  endif()
endfunction()

# --- install ------------------------------------------------------------------------------------
file(REMOVE_RECURSE "${AOTK_SCRATCH_DIR}")
file(MAKE_DIRECTORY "${AOTK_SCRATCH_DIR}")
run_step("install ${AOTK_BUILD_DIR} into ${prefix}"
         ${CMAKE_COMMAND} --install "${AOTK_BUILD_DIR}" --prefix "${prefix}")

# The version's major number names the SONAME link (libaotk.so.0 -> libaotk.so.0.2.0).
string(REGEX MATCH "^[0-9]+" version_major "${AOTK_VERSION}")
set(expected_files
    "${AOTK_INSTALL_INCLUDEDIR}/aotk.h"
    "${AOTK_INSTALL_LIBDIR}/libaotk.so"
    "${AOTK_INSTALL_LIBDIR}/libaotk.so.${version_major}"
    "${AOTK_INSTALL_LIBDIR}/libaotk.so.${AOTK_VERSION}"
    "${AOTK_INSTALL_LIBDIR}/libaotk.a"
    "${AOTK_INSTALL_LIBDIR}/cmake/aotk/aotkConfig.cmake"
    "${AOTK_INSTALL_LIBDIR}/cmake/aotk/aotkConfigVersion.cmake"
    "${AOTK_INSTALL_LIBDIR}/cmake/aotk/aotkTargets.cmake"
    "${AOTK_INSTALL_LIBDIR}/pkgconfig/aotk.pc"
    "${AOTK_INSTALL_BINDIR}/aotk")
message(STATUS "check the installed tree")
foreach(file IN LISTS expected_files)
  if(NOT EXISTS "${prefix}/${file}")
    file(GLOB_RECURSE installed RELATIVE "${prefix}" "${prefix}/*")
    string(REPLACE ";" "\n  " installed "${installed}")
    message(FATAL_ERROR "the install lacks ${file}; it holds:\n  ${installed}")
  endif()
  message(STATUS "  ok ${file}")
endforeach()
# The development link points at the SONAME link, which points at the real file.
foreach(link "libaotk.so" "libaotk.so.${version_major}")
  if(NOT IS_SYMLINK "${libdir}/${link}")
    message(FATAL_ERROR "${AOTK_INSTALL_LIBDIR}/${link} should be a symbolic link")
  endif()
endforeach()
run_step("the installed command line runs" "${prefix}/${AOTK_INSTALL_BINDIR}/aotk" info)
if(NOT step_output MATCHES "aotk ${AOTK_VERSION}")
  message(FATAL_ERROR "installed `aotk info` does not report version ${AOTK_VERSION}:\n${step_output}")
endif()

# --- a. and b.: a CMake project using find_package(aotk) ------------------------------------------
# A stray LD_LIBRARY_PATH would hide a missing run path: the CMake-built programs run without one.
unset(ENV{LD_LIBRARY_PATH})
run_step("configure tests/install_consumer against the prefix"
         ${CMAKE_COMMAND} -S "${AOTK_SOURCE_DIR}/tests/install_consumer" -B "${consumer_build}"
         -G "${AOTK_GENERATOR}" "-DCMAKE_MAKE_PROGRAM=${AOTK_MAKE_PROGRAM}" "-DCMAKE_C_COMPILER=${AOTK_C_COMPILER}"
         "-DCMAKE_PREFIX_PATH=${prefix}" -DCMAKE_FIND_USE_PACKAGE_REGISTRY=OFF)
# find_package must have found the scratch install, not some other aotk on this machine.
file(STRINGS "${consumer_build}/CMakeCache.txt" aotk_dir_line REGEX "^aotk_DIR:")
if(NOT aotk_dir_line STREQUAL "aotk_DIR:PATH=${libdir}/cmake/aotk")
  message(FATAL_ERROR "find_package(aotk) found the wrong package: ${aotk_dir_line} (expected ${libdir}/cmake/aotk)")
endif()
message(STATUS "  ${aotk_dir_line}")
run_step("build the consumer (shared and static)" ${CMAKE_COMMAND} --build "${consumer_build}")

run_consumer("a. run the consumer linked with aotk::aotk (shared), no LD_LIBRARY_PATH"
             "${consumer_build}/install_consumer_shared")
check_loaded_aotk("${consumer_build}/install_consumer_shared" "${libdir}")
run_consumer("b. run the consumer linked with aotk::aotk_static" "${consumer_build}/install_consumer_static")
check_loaded_aotk("${consumer_build}/install_consumer_static" NONE)

# --- c.: plain cc with pkg-config -----------------------------------------------------------------
find_program(PKG_CONFIG NAMES pkg-config pkgconf)
if(NOT PKG_CONFIG)
  message(STATUS "c. pkg-config: skipped: no pkg-config on this machine")
else()
  set(ENV{PKG_CONFIG_PATH} "${libdir}/pkgconfig")
  run_step("c. pkg-config reads the installed aotk.pc (PKG_CONFIG_PATH=$ENV{PKG_CONFIG_PATH})"
           ${PKG_CONFIG} --modversion aotk)
  string(STRIP "${step_output}" pc_version)
  if(NOT pc_version STREQUAL AOTK_VERSION)
    message(FATAL_ERROR "pkg-config --modversion aotk = '${pc_version}', expected ${AOTK_VERSION}")
  endif()
  # aotk.pc locates the prefix relative to its own directory: its libdir and includedir must land
  # on the installed directories whatever CMAKE_INSTALL_LIBDIR's depth.
  foreach(variable libdir includedir)
    run_step("c. pkg-config --variable=${variable} aotk" ${PKG_CONFIG} --variable=${variable} aotk)
    string(STRIP "${step_output}" pc_path)
    string(TOUPPER "${variable}" upper)
    get_filename_component(pc_path "${pc_path}" REALPATH)
    get_filename_component(installed_path "${prefix}/${AOTK_INSTALL_${upper}}" REALPATH)
    if(NOT pc_path STREQUAL installed_path)
      message(FATAL_ERROR "aotk.pc's ${variable} resolves to ${pc_path}, not the installed ${installed_path}")
    endif()
    message(STATUS "  ${variable} = ${pc_path}")
  endforeach()
  run_step("c. pkg-config --cflags --libs aotk" ${PKG_CONFIG} --cflags --libs aotk)
  string(STRIP "${step_output}" pc_flags)
  message(STATUS "  ${pc_flags}")
  separate_arguments(pc_flags UNIX_COMMAND "${pc_flags}")
  set(pc_program "${AOTK_SCRATCH_DIR}/install_consumer_pkg_config")
  run_step("c. compile with cc and pkg-config's flags"
           ${AOTK_C_COMPILER} -std=c11 -Wall -Wextra -Wpedantic -Werror
           "${AOTK_SOURCE_DIR}/tests/install_consumer/install_consumer.c" -o "${pc_program}" ${pc_flags})
  run_consumer("c. run it with LD_LIBRARY_PATH=${libdir}"
               ${CMAKE_COMMAND} -E env "LD_LIBRARY_PATH=${libdir}" "${pc_program}")
endif()

message(STATUS "test_install: PASS")
