# Helpers shared by tests/ and bench/: one line per test or benchmark program.
include(GoogleTest)

# parallax_add_test(NAME SOURCES... LIBS libs... [LABEL label] [SERIAL])
# One label: gtest_discover_tests flattens a list of them and reads the second label as a property
# name (which once swallowed the RUN_SERIAL after it). SERIAL: run alone (tests that time things).
function(parallax_add_test name)
  cmake_parse_arguments(ARG "SERIAL" "LABEL" "SOURCES;LIBS" ${ARGN})
  add_executable(${name} ${ARG_SOURCES})
  target_link_libraries(${name} PRIVATE ${ARG_LIBS} GTest::gtest_main)
  set_target_properties(${name} PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/tests)
  set(props ENVIRONMENT "PARALLAX_BIN_DIR=${CMAKE_BINARY_DIR}/bin")
  if(ARG_LABEL)
    list(APPEND props LABELS ${ARG_LABEL})
  endif()
  if(ARG_SERIAL)
    list(APPEND props RUN_SERIAL TRUE)
  endif()
  # Listing a CUDA test binary's tests starts the CUDA runtime, which took over the default 5 s on a
  # loaded 2-core machine and failed the build.
  gtest_discover_tests(${name} PROPERTIES ${props} DISCOVERY_TIMEOUT 60)
endfunction()

# parallax_add_bench(NAME SOURCES... LIBS libs...)
function(parallax_add_bench name)
  cmake_parse_arguments(ARG "" "" "SOURCES;LIBS" ${ARGN})
  add_executable(${name} ${ARG_SOURCES})
  target_link_libraries(${name} PRIVATE ${ARG_LIBS} benchmark::benchmark)
endfunction()
