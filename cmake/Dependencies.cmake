# Debian-packaged dependencies (installed by scripts/install-deps.sh); docs/dependencies.md says why each.
find_package(Threads REQUIRED)
find_package(nlohmann_json 3.10 REQUIRED)   # nlohmann-json3-dev
find_package(CLI11 2.1 REQUIRED)            # libcli11-dev
find_package(fmt 9 REQUIRED)                # libfmt-dev
set(BLA_VENDOR OpenBLAS)
find_package(BLAS)                          # libopenblas-dev (the solvers need it; others do not)
find_package(LAPACK)
if(LITHE_TESTS)
  find_package(GTest REQUIRED)              # libgtest-dev
endif()
if(LITHE_BENCH)
  find_package(benchmark REQUIRED)          # libbenchmark-dev
endif()
# libcpp-httplib-dev: the HTTP server of `lithe serve` (a compiled library; its flags via pkg-config).
# Optional so that machines without the package (the GPU hosts) still build everything else.
find_package(PkgConfig)
if(PkgConfig_FOUND)
  pkg_check_modules(HTTPLIB IMPORTED_TARGET cpp-httplib)
endif()
if(NOT HTTPLIB_FOUND AND EXISTS ${PROJECT_SOURCE_DIR}/third_party/cpp-httplib/httplib.h)
  # scripts/fetch_httplib.sh's single header (header-only mode, no TLS): the GPU hosts
  add_library(lithe_httplib INTERFACE)
  target_include_directories(lithe_httplib SYSTEM INTERFACE ${PROJECT_SOURCE_DIR}/third_party/cpp-httplib)
  add_library(PkgConfig::HTTPLIB ALIAS lithe_httplib)
  set(HTTPLIB_FOUND TRUE)
  message(STATUS "cpp-httplib: third_party/cpp-httplib/httplib.h (header-only)")
endif()
if(NOT HTTPLIB_FOUND)
  message(WARNING "cpp-httplib not found (libcpp-httplib-dev, or scripts/fetch_httplib.sh): `lithe serve` will only "
                  "report that")
endif()
