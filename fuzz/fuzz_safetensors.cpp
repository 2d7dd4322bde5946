// libFuzzer target: the fuzz input is a safetensors file. On a successful parse every tensor view
// is checked and touched, then the tensors are written again with the Writer and the result must
// parse to the same tensors and metadata (the writer accepts whatever the reader accepts).
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "fuzz_util.h"
#include "lithe/formats/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace lithe;
  BufferPtr input = fuzz::exact_buffer(data, size);
  Result<safetensors::File> f = safetensors::File::parse(input, "fuzz");
  if (!f.is_ok()) {
    if (f.status().message().empty()) __builtin_trap();
    return 0;
  }
  volatile size_t sink = 0;
  safetensors::Writer w;
  for (const auto& [k, v] : f->metadata())
    if (!w.set_metadata(k, v).is_ok()) __builtin_trap();
  for (const auto& info : f->tensors()) {
    Result<Tensor> t = f->tensor(info);
    if (!t.is_ok() || t->nbytes() != info.nbytes()) __builtin_trap();  // the reader checked the range
    sink = sink + fuzz::touch(*t, input);
    if (f->find_tensor(info.name) == nullptr) __builtin_trap();
    if (!w.add_tensor(info.name, *t).is_ok()) __builtin_trap();
  }
  Result<std::vector<uint8_t>> bytes = w.serialize();
  if (!bytes.is_ok()) __builtin_trap();
  BufferPtr again_input = fuzz::exact_buffer(bytes->data(), bytes->size());
  Result<safetensors::File> again = safetensors::File::parse(again_input, "rewritten");
  if (!again.is_ok() || again->tensors().size() != f->tensors().size() || again->metadata() != f->metadata())
    __builtin_trap();
  for (const auto& info : f->tensors()) {
    const safetensors::TensorInfo* a = again->find_tensor(info.name);
    if (a == nullptr || a->dtype != info.dtype || a->shape != info.shape || a->nbytes() != info.nbytes()) __builtin_trap();
    Tensor x = again->tensor(*a).value(), y = f->tensor(info).value();
    if (x.nbytes() > 0 && std::memcmp(x.data(), y.data(), x.nbytes()) != 0) __builtin_trap();
  }
  (void)sink;
  return 0;
}
