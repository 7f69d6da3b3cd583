# reel_bundle_source(<var> <strip> <namespace prefix> <source>...): the text of one translation
# unit made of several sources (test suites, benchmarks), in <var>_INCLUDES and <var>_BODY:
# every source's #include lines, once each, to go first at global scope, then each source
# inside a namespace of its own, <namespace prefix><name>, where <name> is the file's name
# without its extension and without the prefix <strip> (the names, in order: <var>_NAMES). The project re-configures when a
# source changes (its includes may have). Used by tests/ and tests/cuda/.
function(reel_bundle_source var strip ns)
  set(includes "")
  set(body "")
  set(names "")
  foreach(file IN LISTS ARGN)
    get_filename_component(name ${file} NAME_WE)
    if(strip)
      string(REGEX REPLACE "^${strip}" "" name ${name})
    endif()
    list(APPEND names ${name})
    set_property(DIRECTORY APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS ${file})
    file(STRINGS ${file} lines REGEX "^#include ")
    list(APPEND includes ${lines})
    string(APPEND body "namespace ${ns}${name} {\n#include \"${file}\"\n}  // namespace ${ns}${name}\n")
  endforeach()
  list(REMOVE_DUPLICATES includes)
  list(JOIN includes "\n" includes)
  set(${var}_INCLUDES "${includes}" PARENT_SCOPE)
  set(${var}_BODY "${body}" PARENT_SCOPE)
  set(${var}_NAMES "${names}" PARENT_SCOPE)
endfunction()

# reel_bundle_spec(<spec> <name var> <members var>): a bundle written "name:a,b,c" split into
# its name and the list of its members.
function(reel_bundle_spec spec name_var members_var)
  string(REPLACE ":" ";" parts "${spec}")
  string(REPLACE "," ";" parts "${parts}")
  list(GET parts 0 bname)
  list(REMOVE_AT parts 0)
  set(${name_var} ${bname} PARENT_SCOPE)
  set(${members_var} ${parts} PARENT_SCOPE)
endfunction()
