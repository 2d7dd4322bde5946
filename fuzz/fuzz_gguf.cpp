// libFuzzer target: the fuzz input is a GGUF file. On a successful parse, every metadata value is
// summarised and read through its typed accessors, and every tensor view is checked and touched.
#include <cstddef>
#include <cstdint>

#include "fuzz_util.h"
#include "lithe/formats/gguf.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace lithe;
  BufferPtr input = fuzz::exact_buffer(data, size);
  Result<gguf::File> f = gguf::File::parse(input, "fuzz");
  if (!f.is_ok()) {
    if (f.status().message().empty()) __builtin_trap();  // errors must say something
    return 0;
  }
  volatile size_t sink = 0;
  for (const auto& [key, value] : f->metadata()) {
    sink = sink + value.summary().size() + key.size();
    // Accessors must answer with a value or an error, never crash.
    sink = sink + value.as_int().is_ok() + value.as_uint().is_ok() + value.as_float().is_ok() +
           value.as_bool().is_ok() + value.as_string().is_ok() + value.as_string_array().is_ok();
    if (auto arr = value.as_array(); arr.is_ok()) sink = sink + (*arr)->size();
    if (f->find(key) == nullptr) __builtin_trap();
  }
  sink = sink + f->get_int_or("general.alignment", 0) + f->get_string_or("general.architecture", "").size();
  for (const auto& info : f->tensors()) {
    Result<Tensor> t = f->tensor(info);
    if (!t.is_ok()) continue;  // a reader may defer some checks to tensor(); it must not crash
    if (t->nbytes() != info.nbytes) __builtin_trap();
    sink = sink + fuzz::touch(*t, input);
    if (f->find_tensor(info.name) == nullptr) __builtin_trap();
  }
  (void)sink;
  return 0;
}
