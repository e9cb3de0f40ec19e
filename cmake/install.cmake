# Install layout: bin/ lib/ include/ringrun/ lib/cmake/ringrun/ lib/pkgconfig/ share/man/.
include(CMakePackageConfigHelpers)
install(EXPORT ringrunTargets NAMESPACE ringrun:: DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/ringrun)
configure_package_config_file(${CMAKE_CURRENT_LIST_DIR}/ringrunConfig.cmake.in
  ${CMAKE_BINARY_DIR}/ringrunConfig.cmake INSTALL_DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/ringrun)
write_basic_package_version_file(${CMAKE_BINARY_DIR}/ringrunConfigVersion.cmake COMPATIBILITY SameMinorVersion)
install(FILES ${CMAKE_BINARY_DIR}/ringrunConfig.cmake ${CMAKE_BINARY_DIR}/ringrunConfigVersion.cmake
  DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/ringrun)
configure_file(${CMAKE_CURRENT_LIST_DIR}/ringrun.pc.in ${CMAKE_BINARY_DIR}/ringrun.pc @ONLY)
install(FILES ${CMAKE_BINARY_DIR}/ringrun.pc DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)
