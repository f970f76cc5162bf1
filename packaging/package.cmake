# What `cmake --install` puts where, and the Debian package CPack makes of it
# (packaging/kvchat.sh package). Included from the top-level CMakeLists.txt after the targets.
include(GNUInstallDirs)

set(KVCHAT_PACKAGING_DIR ${CMAKE_CURRENT_LIST_DIR})

install(TARGETS kvchat-cli RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
# The CUDA backend, where the programs look for it (../lib/kvchat beside bin/). It is loaded only
# for --device cuda, so the package must not depend on the CUDA libraries it needs (see below).
if(TARGET kvchat_cuda)
  install(TARGETS kvchat_cuda LIBRARY DESTINATION lib/kvchat)
endif()
if(KVCHAT_BUILD_GUI)
  install(TARGETS kvchat RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
  # XDG places: the menu entry, the software-centre metadata, the icon in the hicolor theme
  # (scalable plus the two fixed sizes), and the GGUF file type the entry opens.
  install(FILES ${KVCHAT_PACKAGING_DIR}/${KVCHAT_APP_ID}.desktop DESTINATION ${CMAKE_INSTALL_DATADIR}/applications)
  install(FILES ${KVCHAT_PACKAGING_DIR}/${KVCHAT_APP_ID}.metainfo.xml DESTINATION ${CMAKE_INSTALL_DATADIR}/metainfo)
  install(FILES ${KVCHAT_PACKAGING_DIR}/${KVCHAT_APP_ID}.mime.xml DESTINATION ${CMAKE_INSTALL_DATADIR}/mime/packages
          RENAME ${KVCHAT_APP_ID}.xml)
  install(FILES ${KVCHAT_APP_ICON_SVG} DESTINATION ${CMAKE_INSTALL_DATADIR}/icons/hicolor/scalable/apps
          RENAME ${KVCHAT_APP_ID}.svg)
  foreach(size 48 256)
    install(FILES ${KVCHAT_APP_ICON_PNG_DIR}/app-icon-${size}.png
            DESTINATION ${CMAKE_INSTALL_DATADIR}/icons/hicolor/${size}x${size}/apps RENAME ${KVCHAT_APP_ID}.png)
  endforeach()
endif()

set(KVCHAT_PACKAGE_MAINTAINER "The kvchat developers <kvchat@users.noreply.github.com>" CACHE STRING
    "The Maintainer field of the .deb")

set(CPACK_GENERATOR DEB)
set(CPACK_PACKAGE_NAME kvchat)
set(CPACK_PACKAGE_VERSION ${PROJECT_VERSION})
set(CPACK_PACKAGE_VENDOR "The kvchat developers")
set(CPACK_PACKAGE_CONTACT ${KVCHAT_PACKAGE_MAINTAINER})
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY "local chat with language models and a persistent, inspectable KV cache")
# The Description field's long part (CPack indents it for the control file).
set(CPACK_PACKAGE_DESCRIPTION
"kvchat runs language models (GGUF files and Hugging Face folders of Gemma 3
and the Llama family) on your own computer with its own inference engine. Each
conversation keeps its key-value cache in a local database, so a new message
computes only its own tokens, also after a restart. The cache strategy
(dynamic, static, offloaded, quantized, sliding window, sinks, hybrid) can be
switched while chatting and is shown in a cache inspector.

This package holds the desktop app (kvchat) and the terminal tool
(kvchat-cli). The default model, Gemma 3 270M, is installed per user from
PyPI; kvchat-cli prints the commands when it is missing. The engine needs a
CPU with AVX2 and FMA.")
set(CPACK_STRIP_FILES ON)
set(CPACK_PACKAGING_INSTALL_PREFIX /usr)
set(CPACK_DEBIAN_PACKAGE_MAINTAINER ${KVCHAT_PACKAGE_MAINTAINER})
set(CPACK_DEBIAN_PACKAGE_SECTION science)
set(CPACK_DEBIAN_PACKAGE_PRIORITY optional)
set(CPACK_DEBIAN_PACKAGE_HOMEPAGE "https://github.com/kvchat/kvchat")
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
# Libraries the binaries link are found by dpkg-shlibdeps; what is loaded at run time is named here:
# python3-venv runs the default model's install commands, qt6-wayland lets the app run natively
# on a Wayland session (X11 works without it).
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)
set(CPACK_DEBIAN_PACKAGE_RECOMMENDS "python3-venv")
if(KVCHAT_BUILD_GUI)
  set(CPACK_DEBIAN_PACKAGE_RECOMMENDS "${CPACK_DEBIAN_PACKAGE_RECOMMENDS}, qt6-wayland")
endif()
include(CPack)
