# Installation and packaging, included at the end of the top-level CMakeLists.txt:
#   headers          <prefix>/include/rmp/
#   librmp.so        <prefix>/lib/ (soname librmp.so.0.<minor> before 1.0)
#   rlaunch, rinfo   <prefix>/bin/ (when those targets exist), RPATH $ORIGIN/../lib
#   CMake package    <prefix>/lib/cmake/rmp/: find_package(rmp) gives rmp::rmp (and
#                    rmp::rlaunch, rmp::rinfo as imported executables)
#   pkg-config       <prefix>/lib/pkgconfig/rmp.pc: g++ app.cpp $(pkg-config --cflags --libs rmp)
# Everything is relative to the prefix chosen at install time (cmake --install --prefix P).
include(CMakePackageConfigHelpers)

set(RMP_INSTALL_CMAKEDIR "${CMAKE_INSTALL_LIBDIR}/cmake/rmp" CACHE STRING
    "Where the CMake package files go, relative to the install prefix")

install(TARGETS rmp EXPORT rmpTargets
        LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR} COMPONENT runtime NAMELINK_COMPONENT devel
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR} COMPONENT devel
        RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR} COMPONENT runtime
        INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(DIRECTORY ${PROJECT_SOURCE_DIR}/include/rmp DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}
        COMPONENT devel FILES_MATCHING PATTERN "*.hpp" PATTERN "*.h")

# The tools find librmp (if they link it) next to themselves, wherever the prefix ends up.
file(RELATIVE_PATH _rmp_bin_to_lib ${CMAKE_INSTALL_FULL_BINDIR} ${CMAKE_INSTALL_FULL_LIBDIR})
foreach(_rmp_tool IN ITEMS rlaunch rinfo)
  if(TARGET ${_rmp_tool})
    set_property(TARGET ${_rmp_tool} APPEND PROPERTY INSTALL_RPATH "$ORIGIN/${_rmp_bin_to_lib}")
    install(TARGETS ${_rmp_tool} EXPORT rmpTargets
            RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR} COMPONENT runtime)
  endif()
endforeach()

# CMake package: targets (namespace rmp::), config and version files.
install(EXPORT rmpTargets NAMESPACE rmp:: FILE rmpTargets.cmake
        DESTINATION ${RMP_INSTALL_CMAKEDIR} COMPONENT devel)
configure_package_config_file(${CMAKE_CURRENT_LIST_DIR}/rmpConfig.cmake.in
                              ${PROJECT_BINARY_DIR}/rmpConfig.cmake
                              INSTALL_DESTINATION ${RMP_INSTALL_CMAKEDIR}
                              PATH_VARS CMAKE_INSTALL_BINDIR)
# 0.x: a minor release may break the API, so only the same major.minor is compatible.
write_basic_package_version_file(${PROJECT_BINARY_DIR}/rmpConfigVersion.cmake
                                 VERSION ${PROJECT_VERSION} COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/rmpConfig.cmake ${PROJECT_BINARY_DIR}/rmpConfigVersion.cmake
        DESTINATION ${RMP_INSTALL_CMAKEDIR} COMPONENT devel)

# pkg-config. rmp.pc carries absolute paths (an rpath in particular), so it is written at
# install time, when the final prefix is known, then installed like any other file.
if(IS_ABSOLUTE "${CMAKE_INSTALL_LIBDIR}")
  set(_rmp_pc_libdir "${CMAKE_INSTALL_LIBDIR}")
else()
  set(_rmp_pc_libdir "\${prefix}/${CMAKE_INSTALL_LIBDIR}")
endif()
if(IS_ABSOLUTE "${CMAKE_INSTALL_INCLUDEDIR}")
  set(_rmp_pc_includedir "${CMAKE_INSTALL_INCLUDEDIR}")
else()
  set(_rmp_pc_includedir "\${prefix}/${CMAKE_INSTALL_INCLUDEDIR}")
endif()
set(_rmp_pc_out ${PROJECT_BINARY_DIR}/pkgconfig/rmp.pc)
# Bracket arguments keep the literal "${prefix}" from being expanded by the install script.
install(CODE "
  set(RMP_PC_PREFIX \"\${CMAKE_INSTALL_PREFIX}\")
  set(RMP_PC_LIBDIR [==[${_rmp_pc_libdir}]==])
  set(RMP_PC_INCLUDEDIR [==[${_rmp_pc_includedir}]==])
  set(PROJECT_DESCRIPTION [==[${PROJECT_DESCRIPTION}]==])
  set(PROJECT_VERSION [==[${PROJECT_VERSION}]==])
  configure_file([==[${CMAKE_CURRENT_LIST_DIR}/rmp.pc.in]==] [==[${_rmp_pc_out}]==] @ONLY)
" COMPONENT devel)
install(FILES ${_rmp_pc_out} DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig COMPONENT devel)
