// `lithe serve` in a build without cpp-httplib (CMake did not find libcpp-httplib-dev, e.g. on a
// GPU machine without the package and without scripts/fetch_httplib.sh's header): the engine is built, the HTTP front says how to get it.
#include "lithe/serve/server.h"

namespace lithe::serve {

Status serve(Model& model, const ServerOptions& options) {
  (void)model;
  (void)options;
  return error(StatusCode::unsupported,
               "this lithe was built without cpp-httplib, so it cannot serve HTTP: install libcpp-httplib-dev "
               "(scripts/install-deps.sh), or where there is no such package run scripts/fetch_httplib.sh, and rebuild");
}

}  // namespace lithe::serve
