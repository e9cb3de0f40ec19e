# Where things are installed (README, "Install layout").
#   cmake --install:  <prefix>/bin, <prefix>/lib, <prefix>/lib/python3/dist-packages/ringrun, ...
#   pip install (scikit-build-core sets SKBUILD): the programs and the library inside the Python
#     package, site-packages/ringrun/{bin,lib}, beside the extension, so that every RUNPATH is
#     $ORIGIN-relative and a wheel's repair step (auditwheel) sees all of them; the environment's
#     root (the wheel's data) gets the headers, the CMake and pkg-config files, the man pages, the
#     completion, and bin/ringrun and bin/ringrun-bench, scripts that start the package's programs.
# RINGRUN_PACKAGE_DIR: the package, relative to the prefix (cmake --install) or absolute (pip).
# RINGRUN_PACKAGE_FROM_PREFIX: the package relative to the environment's root once pip installed it
#   (lib/python3.11/site-packages/ringrun in a venv), for the files at the root that point at it.
if(SKBUILD)
  set(RINGRUN_PACKAGE_DIR ${SKBUILD_PLATLIB_DIR}/ringrun)
  set(RINGRUN_PROGRAM_DIR ${RINGRUN_PACKAGE_DIR}/bin)
  set(RINGRUN_LIBRARY_DIR ${RINGRUN_PACKAGE_DIR}/lib)
  execute_process(COMMAND ${Python_EXECUTABLE} -c
    "import sysconfig; print(sysconfig.get_path('platlib', vars={'base': '.', 'platbase': '.'}))"
    OUTPUT_VARIABLE platlib_from_prefix OUTPUT_STRIP_TRAILING_WHITESPACE RESULT_VARIABLE platlib_rc)
  if(NOT platlib_rc EQUAL 0)
    message(FATAL_ERROR "ringrun: ${Python_EXECUTABLE} cannot tell its site-packages folder (sysconfig)")
  endif()
  string(REGEX REPLACE "^\\./" "" platlib_from_prefix "${platlib_from_prefix}")
  set(RINGRUN_PACKAGE_FROM_PREFIX ${platlib_from_prefix}/ringrun)
else()
  set(RINGRUN_PACKAGE_DIR lib/python3/dist-packages/ringrun)
  set(RINGRUN_PROGRAM_DIR ${CMAKE_INSTALL_BINDIR})
  set(RINGRUN_LIBRARY_DIR ${CMAKE_INSTALL_LIBDIR})
  set(RINGRUN_PACKAGE_FROM_PREFIX ${RINGRUN_PACKAGE_DIR})
endif()

# The RUNPATH that finds the library from a file installed in `dir` (relative to the prefix, or
# absolute under pip).
function(ringrun_rpath_to_library out dir)
  if(IS_ABSOLUTE "${dir}")
    file(RELATIVE_PATH relative "${dir}" "${RINGRUN_LIBRARY_DIR}")
  else()
    file(RELATIVE_PATH relative "${CMAKE_INSTALL_PREFIX}/${dir}" "${CMAKE_INSTALL_PREFIX}/${RINGRUN_LIBRARY_DIR}")
  endif()
  set(${out} "$ORIGIN/${relative}" PARENT_SCOPE)
endfunction()
