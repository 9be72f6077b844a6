# `cmake --install build --prefix P`: a relocatable package for programs and
# model plugins built out of tree (docs/plugins.md):
#   P/lib/libbumblebee.so            every layer
#   P/include/bumblebee/<layer>/     the public headers, in the layered folders
#   P/bin/bb-*, bbrun                the tools (RPATH $ORIGIN/../lib)
#   P/lib/cmake/bumblebee/           bumblebeeConfig.cmake (+ version), so that
#                                    find_package(bumblebee) gives bumblebee::bumblebee
# Nothing in the package names the build or source tree.
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

install(TARGETS bumblebee_shared EXPORT bumblebeeTargets
        LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
        INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(FILES ${CMAKE_SOURCE_DIR}/bumblebee/version.h DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/bumblebee)
foreach(layer ${BB_LAYERS})
  install(DIRECTORY ${CMAKE_SOURCE_DIR}/bumblebee/${layer} DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/bumblebee
          FILES_MATCHING PATTERN "*.h" PATTERN "*.cuh")
endforeach()
foreach(src ${BB_TOOL_SOURCES})
  get_filename_component(name ${src} NAME_WE)
  install(TARGETS ${name} RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
endforeach()
install(PROGRAMS ${BB_TOOL_SCRIPTS} DESTINATION ${CMAKE_INSTALL_BINDIR})

set(BB_CONFIG_DIR ${CMAKE_INSTALL_LIBDIR}/cmake/bumblebee)
install(EXPORT bumblebeeTargets NAMESPACE bumblebee:: DESTINATION ${BB_CONFIG_DIR})
configure_package_config_file(${CMAKE_SOURCE_DIR}/cmake/bumblebeeConfig.cmake.in
                              ${CMAKE_BINARY_DIR}/bumblebeeConfig.cmake INSTALL_DESTINATION ${BB_CONFIG_DIR})
write_basic_package_version_file(${CMAKE_BINARY_DIR}/bumblebeeConfigVersion.cmake
                                 VERSION ${BB_VERSION} COMPATIBILITY SameMinorVersion)
install(FILES ${CMAKE_BINARY_DIR}/bumblebeeConfig.cmake ${CMAKE_BINARY_DIR}/bumblebeeConfigVersion.cmake
        DESTINATION ${BB_CONFIG_DIR})
