# The files that let C and C++ programs find ringrun: lib/cmake/ringrun/ (find_package) and
# lib/pkgconfig/ringrun.pc, at the prefix's root (cmake/layout.cmake says where the library is).
include(CMakePackageConfigHelpers)
write_basic_package_version_file(${CMAKE_BINARY_DIR}/ringrunConfigVersion.cmake COMPATIBILITY SameMinorVersion)
if(SKBUILD)
  # The library is inside the Python package; the config file finds it from where it is installed.
  configure_file(${CMAKE_CURRENT_LIST_DIR}/ringrunConfig.pip.cmake.in ${CMAKE_BINARY_DIR}/ringrunConfig.cmake @ONLY)
  set(RINGRUN_PC_LIBDIR "\${prefix}/${RINGRUN_PACKAGE_FROM_PREFIX}/lib")
  set(RINGRUN_PC_LIBS "-L\${libdir} -l:libringrun_runtime.so.0 -Wl,-rpath,\${libdir}")
else()
  install(EXPORT ringrunTargets NAMESPACE ringrun:: DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/ringrun)
  configure_package_config_file(${CMAKE_CURRENT_LIST_DIR}/ringrunConfig.cmake.in
    ${CMAKE_BINARY_DIR}/ringrunConfig.cmake INSTALL_DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/ringrun)
  set(RINGRUN_PC_LIBDIR "\${prefix}/${CMAKE_INSTALL_LIBDIR}")
  set(RINGRUN_PC_LIBS "-L\${libdir} -lringrun_runtime")
endif()
install(FILES ${CMAKE_BINARY_DIR}/ringrunConfig.cmake ${CMAKE_BINARY_DIR}/ringrunConfigVersion.cmake
  DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/ringrun)
configure_file(${CMAKE_CURRENT_LIST_DIR}/ringrun.pc.in ${CMAKE_BINARY_DIR}/ringrun.pc @ONLY)
install(FILES ${CMAKE_BINARY_DIR}/ringrun.pc DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)
