# liberma.so and liberma.a from the same objects, their installation, erma.pc
# and the CMake package (find_package(erma) -> erma::erma, erma::erma_static).

add_library(erma_shared SHARED $<TARGET_OBJECTS:erma_objects>)
add_library(erma_static STATIC $<TARGET_OBJECTS:erma_objects>)
set_target_properties(erma_shared PROPERTIES OUTPUT_NAME erma VERSION ${PROJECT_VERSION}
  SOVERSION ${ERMA_SOVERSION} LIBRARY_OUTPUT_DIRECTORY ${ERMA_BUILD_LIBDIR}
  EXPORT_NAME erma)
set_target_properties(erma_static PROPERTIES OUTPUT_NAME erma POSITION_INDEPENDENT_CODE ON
  ARCHIVE_OUTPUT_DIRECTORY ${ERMA_BUILD_LIBDIR} EXPORT_NAME erma_static)
# Nothing but erma_ names leaves the shared library, whatever a header declares.
target_link_options(erma_shared PRIVATE -Wl,--version-script=${PROJECT_SOURCE_DIR}/cmake/erma.map)
if(NOT ERMA_SANITIZE AND NOT ERMA_TSAN) # sanitizer runtimes come from the program
  target_link_options(erma_shared PRIVATE -Wl,--no-undefined)
endif()
set_property(TARGET erma_shared APPEND PROPERTY LINK_DEPENDS ${PROJECT_SOURCE_DIR}/cmake/erma.map)
foreach(t erma_shared erma_static)
  target_include_directories(${t} INTERFACE
    $<BUILD_INTERFACE:${PROJECT_SOURCE_DIR}/include>
    $<BUILD_INTERFACE:${PROJECT_BINARY_DIR}/include>
    $<INSTALL_INTERFACE:${CMAKE_INSTALL_INCLUDEDIR}>)
endforeach()
target_link_libraries(erma_shared PRIVATE PkgConfig::SODIUM Threads::Threads m ${CMAKE_DL_LIBS})
target_link_libraries(erma_static INTERFACE $<LINK_ONLY:PkgConfig::SODIUM>
  $<LINK_ONLY:Threads::Threads> $<LINK_ONLY:m> $<LINK_ONLY:${CMAKE_DL_LIBS}>)
add_library(erma::erma ALIAS erma_shared)
add_library(erma::erma_static ALIAS erma_static)

install(TARGETS erma_shared erma_static EXPORT erma-targets
        LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR})
# The application API; the driver SDK (transport drivers, congestion control,
# the wire codec, the buffer pool) only when asked, as DPDK installs its
# driver headers only with enable_driver_sdk.
install(DIRECTORY include/erma DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}
        FILES_MATCHING PATTERN "*.h" PATTERN sdk EXCLUDE)
if(ERMA_INSTALL_SDK)
  install(DIRECTORY include/erma/sdk DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/erma
          FILES_MATCHING PATTERN "*.h")
endif()
install(FILES ${PROJECT_BINARY_DIR}/include/erma/version.h
        DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/erma)

# erma.pc finds the prefix from its own place, so an installation can move.
file(RELATIVE_PATH ERMA_PC_TO_PREFIX /prefix/${CMAKE_INSTALL_LIBDIR}/pkgconfig /prefix)
configure_file(cmake/erma.pc.in ${PROJECT_BINARY_DIR}/erma.pc @ONLY)
install(FILES ${PROJECT_BINARY_DIR}/erma.pc DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)

include(CMakePackageConfigHelpers)
set(cmakedir ${CMAKE_INSTALL_LIBDIR}/cmake/erma)
install(EXPORT erma-targets NAMESPACE erma:: DESTINATION ${cmakedir})
configure_package_config_file(cmake/erma-config.cmake.in
  ${PROJECT_BINARY_DIR}/erma-config.cmake INSTALL_DESTINATION ${cmakedir})
write_basic_package_version_file(${PROJECT_BINARY_DIR}/erma-config-version.cmake
  COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/erma-config.cmake
        ${PROJECT_BINARY_DIR}/erma-config-version.cmake DESTINATION ${cmakedir})
