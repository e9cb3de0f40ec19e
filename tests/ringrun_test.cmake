# ringrun_unit_test(NAME SOURCES... LIBS ... [TIMEOUT s] [LABELS ...]): a doctest executable
# whose test cases run as one ctest test. doctest_main.cpp supplies main().
function(ringrun_unit_test name)
  cmake_parse_arguments(arg "" "TIMEOUT" "SOURCES;LIBS;LABELS" ${ARGN})
  if(NOT arg_TIMEOUT)
    set(arg_TIMEOUT 120)
  endif()
  # ThreadSanitizer slows the runtime 5-15x: the same tests get four times as long.
  if(RINGRUN_SANITIZE MATCHES "thread")
    math(EXPR arg_TIMEOUT "${arg_TIMEOUT} * 4")
  endif()
  add_executable(${name} ${arg_SOURCES} ${PROJECT_SOURCE_DIR}/tests/doctest_main.cpp)
  set_target_properties(${name} PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/tests)
  target_link_libraries(${name} PRIVATE doctest::doctest ringrun_warnings ${arg_LIBS})
  target_compile_definitions(${name} PRIVATE
    RINGRUN_SOURCE_DIR="${PROJECT_SOURCE_DIR}" RINGRUN_BINARY_DIR="${CMAKE_BINARY_DIR}")
  if(RINGRUN_SANITIZE MATCHES "thread")
    target_compile_definitions(${name} PRIVATE RINGRUN_UNDER_TSAN=1)  # tests skip timing bounds
  endif()
  add_test(NAME ${name} COMMAND ${name})
  set_tests_properties(${name} PROPERTIES TIMEOUT ${arg_TIMEOUT} LABELS "${arg_LABELS}")
endfunction()
