# kvchat_engine_layer(): one static library per engine layer (engine/<name>/), with its files listed
# and the layers it uses declared, lower layers first. The declaration is also what the build
# enforces: before a layer compiles, check_layer_includes.cmake reads every listed file's
# #include lines and fails the build, naming the file, the line and what the layer may include,
# when one reaches a layer that was not declared (an upward include, say engine/cache including
# engine/chat). A layer's headers may include only its PUBLIC layers (what its users see), its
# .cpp files also its PRIVATE ones. Layers can only name layers defined before them, so the
# graph has no cycles.
#
#   kvchat_engine_layer(NAME [PUBLIC layer...] [PRIVATE layer...] SOURCES file... [CHECKED file...])
#
# SOURCES are relative to the calling folder (engine/) and compiled into kvchat_<NAME>; CHECKED
# files are only checked (code another target compiles, such as compute/cuda, so that a wrong
# include there fails the build on machines without nvcc too). Every .cpp, .h and .inc in
# engine/<NAME>/ must be listed in one of the two: a file that is in neither stops the configure,
# naming it.

set(KVCHAT_LAYER_CHECK_SCRIPT ${CMAKE_CURRENT_LIST_DIR}/check_layer_includes.cmake)
# Files at the top of engine/ (engine/error.h) belong to this layer.
set(KVCHAT_TOP_LEVEL_LAYER common)

function(kvchat_engine_layer name)
  cmake_parse_arguments(PARSE_ARGV 1 arg "" "" "PUBLIC;PRIVATE;SOURCES;CHECKED")
  if(arg_UNPARSED_ARGUMENTS)
    message(FATAL_ERROR "kvchat_engine_layer(${name}): unknown arguments ${arg_UNPARSED_ARGUMENTS}")
  endif()
  get_property(defined GLOBAL PROPERTY KVCHAT_ENGINE_LAYERS)
  foreach(dep IN LISTS arg_PUBLIC arg_PRIVATE)
    if(NOT dep IN_LIST defined)
      message(FATAL_ERROR "kvchat_engine_layer(${name}) uses '${dep}', which is not a layer defined "
        "above it (defined so far: ${defined}). Layers are declared lowest first, so none can use one above it.")
    endif()
  endforeach()

  # Every file of the folder is listed: a new file is added to its layer's list by hand.
  set(listed "")
  foreach(f IN LISTS arg_SOURCES arg_CHECKED)
    list(APPEND listed ${CMAKE_CURRENT_SOURCE_DIR}/${f})
  endforeach()
  file(GLOB present CONFIGURE_DEPENDS ${CMAKE_CURRENT_SOURCE_DIR}/${name}/*.cpp
    ${CMAKE_CURRENT_SOURCE_DIR}/${name}/*.h ${CMAKE_CURRENT_SOURCE_DIR}/${name}/*.inc)
  foreach(f IN LISTS present)
    if(NOT f IN_LIST listed)
      file(RELATIVE_PATH rel ${PROJECT_SOURCE_DIR} ${f})
      # Indented: CMake prints it as it is instead of re-wrapping it.
      message(FATAL_ERROR "  ${rel} is in no list: add it to kvchat_engine_layer(${name} SOURCES ...) "
        "in ${CMAKE_CURRENT_LIST_FILE}")
    endif()
  endforeach()
  foreach(f IN LISTS listed)
    if(NOT EXISTS ${f})
      message(FATAL_ERROR "kvchat_engine_layer(${name}) lists ${f}, which does not exist")
    endif()
  endforeach()

  set(target kvchat_${name})
  add_library(${target} STATIC)
  target_sources(${target} PRIVATE ${arg_SOURCES})
  target_include_directories(${target} PUBLIC ${PROJECT_SOURCE_DIR})
  set(public_targets "")
  set(private_targets "")
  foreach(dep IN LISTS arg_PUBLIC)
    list(APPEND public_targets kvchat_${dep})
  endforeach()
  foreach(dep IN LISTS arg_PRIVATE)
    list(APPEND private_targets kvchat_${dep})
  endforeach()
  target_link_libraries(${target} PUBLIC ${public_targets} PRIVATE ${private_targets})

  # What the check reads: written at configure time, so a changed declaration re-runs it.
  set(config ${CMAKE_CURRENT_BINARY_DIR}/layer_check/${name}.cmake)
  set(stamp ${CMAKE_CURRENT_BINARY_DIR}/layer_check/${name}.stamp)
  file(CONFIGURE OUTPUT ${config} CONTENT [[
set(LAYER "@name@")
set(LAYER_PUBLIC "@arg_PUBLIC@")
set(LAYER_PRIVATE "@arg_PRIVATE@")
set(LAYER_FILES "@listed@")
set(KNOWN_LAYERS "@defined@;@name@")
set(TOP_LEVEL_LAYER "@KVCHAT_TOP_LEVEL_LAYER@")
set(ROOT "@PROJECT_SOURCE_DIR@")
set(DECLARED_IN "@CMAKE_CURRENT_LIST_FILE@")
]] @ONLY)
  add_custom_command(OUTPUT ${stamp}
    COMMAND ${CMAKE_COMMAND} -DCONFIG=${config} -DSTAMP=${stamp} -P ${KVCHAT_LAYER_CHECK_SCRIPT}
    DEPENDS ${listed} ${config} ${KVCHAT_LAYER_CHECK_SCRIPT}
    COMMENT "Checking the includes of engine/${name} against its declared layers"
    VERBATIM)
  add_custom_target(${target}_includes DEPENDS ${stamp})
  # The check runs before any of the layer's files compile.
  add_dependencies(${target} ${target}_includes)

  set_property(GLOBAL APPEND PROPERTY KVCHAT_ENGINE_LAYERS ${name})
endfunction()
