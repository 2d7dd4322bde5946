# Compiler warnings and sanitizers applied to every lithe target through lithe_options.
add_library(lithe_options INTERFACE)
target_compile_options(lithe_options INTERFACE
  $<$<COMPILE_LANGUAGE:CXX>:-Wall -Wextra -Wpedantic -Wshadow -Wnon-virtual-dtor -Wcast-align
   -Woverloaded-virtual -Wimplicit-fallthrough>)
if(LITHE_WERROR)
  target_compile_options(lithe_options INTERFACE $<$<COMPILE_LANGUAGE:CXX>:-Werror>)
endif()
if(LITHE_SANITIZE)
  set(_san -fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer)
  target_compile_options(lithe_options INTERFACE $<$<COMPILE_LANGUAGE:CXX>:${_san}>)
  target_link_options(lithe_options INTERFACE ${_san})
endif()
