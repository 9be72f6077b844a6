// Tests of the safetensors reader and writer: byte-exact round trips, files
// built by hand from the spec, zero-copy views, dropping a tensor's mapped
// pages, and rejection of corrupt headers.
#include "bumblebee/primitive/ckpt/safetensors.h"

#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>

#include <nlohmann/json.hpp>

#include "bumblebee/core/half.h"
#include "bumblebee/core/host_memory.h"
#include "tests/primitive/ckpt/ckpt_test_util.h"

namespace bb {
namespace {

using testing::expect_error;
using testing::read_text;
using testing::write_raw;

class Safetensors : public testing::TempDirTest {};

std::string bytes_of(const Tensor& t) { return std::string(static_cast<const char*>(t.raw()), t.nbytes()); }

std::vector<std::pair<std::string, Tensor>> one_of_each_dtype() {
  std::vector<uint16_t> bf16, f16;
  for (float v : {1.0f, -2.5f, 3.140625f, 0.0f, -0.0f, 65504.0f}) {
    bf16.push_back(float_to_bf16(v));
    f16.push_back(float_to_f16(v));
  }
  Tensor tb = Tensor::empty({2, 3}, DType::BF16);
  std::memcpy(tb.raw(), bf16.data(), 12);
  Tensor th = Tensor::empty({3, 2}, DType::F16);
  std::memcpy(th.raw(), f16.data(), 12);
  return {
      {"u8", Tensor::from_vector<uint8_t>({0, 7, 255}, {3})},
      {"f64", Tensor::from_vector<double>({1.0 / 3.0, -1e300, 2.5, 4.0}, {2, 2})},
      {"bf16", tb},
      {"f32", Tensor::from_vector<float>({0.5f, -7.25f, 1e-20f}, {3, 1})},
      {"i64", Tensor::from_vector<int64_t>({INT64_MIN, -1, INT64_MAX}, {3})},
      {"f16", th},
      {"i32", Tensor::from_vector<int32_t>({-5, 0, 2147483647, 9}, {1, 4})},
      {"scalar", Tensor::from_vector<float>({42.0f}, {})},
      {"empty", Tensor::empty({0, 3}, DType::F32)},
  };
}

TEST_F(Safetensors, RoundTripsEveryDType) {
  const auto tensors = one_of_each_dtype();
  write_safetensors(path("all.safetensors"), tensors, {{"format", "pt"}, {"note", "x=1"}});
  SafetensorsFile f = SafetensorsFile::open(path("all.safetensors"));
  EXPECT_EQ(f.names(), (std::vector<std::string>{"bf16", "empty", "f16", "f32", "f64", "i32", "i64", "scalar", "u8"}));
  EXPECT_EQ(f.metadata(), (std::map<std::string, std::string>{{"format", "pt"}, {"note", "x=1"}}));
  for (const auto& [name, t] : tensors) {
    SCOPED_TRACE(name);
    ASSERT_TRUE(f.has(name));
    Tensor r = f.get(name);
    EXPECT_EQ(r.dtype(), t.dtype());
    EXPECT_EQ(r.shape(), t.shape());
    EXPECT_TRUE(r.device().is_cpu());
    EXPECT_EQ(bytes_of(r), bytes_of(t));
    EXPECT_EQ(f.nbytes(name), t.nbytes());
  }
  EXPECT_EQ(f.get("f64").to_doubles()[0], 1.0 / 3.0);
  EXPECT_EQ(f.get("bf16").to_doubles()[2], 3.140625);
  EXPECT_EQ(f.stored_dtype("bf16"), "BF16");
  EXPECT_EQ(f.stored_dtype("u8"), "U8");
  EXPECT_FALSE(f.has("missing"));
  expect_error([&] { f.get("missing"); }, {"all.safetensors", "'missing'"});
}

TEST_F(Safetensors, WriterLayoutFollowsTheSpec) {
  write_safetensors(path("l.safetensors"), {{"b", Tensor::from_vector<uint8_t>({1, 2, 3}, {3})},
                                             {"a", Tensor::from_vector<double>({2.0}, {1})},
                                             {"c", Tensor::from_vector<float>({1.0f, 2.0f}, {2})}});
  const std::string raw = read_text(path("l.safetensors"));
  uint64_t n = 0;
  std::memcpy(&n, raw.data(), 8);
  EXPECT_EQ(n % 8, 0u);
  const std::string header = raw.substr(8, n);
  EXPECT_EQ(header.find_first_not_of(' ', header.rfind('}') + 1), std::string::npos);  // padded with spaces
  const auto j = nlohmann::json::parse(header);
  // Largest elements first, then the given order: F64 a, F32 c, U8 b.
  EXPECT_EQ(j["a"]["data_offsets"], nlohmann::json({0, 8}));
  EXPECT_EQ(j["c"]["data_offsets"], nlohmann::json({8, 16}));
  EXPECT_EQ(j["b"]["data_offsets"], nlohmann::json({16, 19}));
  EXPECT_EQ(j["c"]["dtype"], "F32");
  EXPECT_EQ(j["c"]["shape"], nlohmann::json({2}));
  EXPECT_FALSE(j.contains("__metadata__"));
  EXPECT_EQ(raw.size(), 8 + n + 19);
  double a = 0;
  std::memcpy(&a, raw.data() + 8 + n, 8);
  EXPECT_EQ(a, 2.0);
}

TEST_F(Safetensors, ReadsAHandBuiltFile) {
  // "w" holds floats 1.5, -2 at [0, 8); "ids" holds bytes 1, 2, 3 at [8, 11).
  std::string data(11, '\0');
  const float w[2] = {1.5f, -2.0f};
  std::memcpy(data.data(), w, 8);
  data[8] = 1, data[9] = 2, data[10] = 3;
  write_raw(path("h.safetensors"),
            R"({"__metadata__":{"k":"v"},"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
            R"("ids":{"dtype":"U8","shape":[1,3],"data_offsets":[8,11]}})",
            data);
  SafetensorsFile f = SafetensorsFile::open(path("h.safetensors"));
  EXPECT_EQ(f.get("w").to_doubles(), (std::vector<double>{1.5, -2.0}));
  EXPECT_EQ(f.get("ids").to_doubles(), (std::vector<double>{1, 2, 3}));
  EXPECT_EQ(f.shape("ids"), (Shape{1, 3}));
  EXPECT_EQ(f.dtype("w"), DType::F32);
  EXPECT_EQ(f.metadata().at("k"), "v");
}

TEST_F(Safetensors, GetIsAZeroCopyViewThatOutlivesTheFileObject) {
  write_safetensors(path("z.safetensors"), {{"w", Tensor::from_vector<float>({1, 2, 3, 4}, {2, 2})}});
  Tensor a, b;
  {
    SafetensorsFile f = SafetensorsFile::open(path("z.safetensors"));
    a = f.get("w");
    b = f.get("w");
  }
  EXPECT_EQ(a.raw(), b.raw());  // both view the mapping; a copy would differ
  EXPECT_FALSE(a.shares_storage(b));
  EXPECT_EQ(a.to_doubles(), (std::vector<double>{1, 2, 3, 4}));
  // The mapping is copy-on-write: writing into the tensor leaves the file alone.
  a.data<float>()[0] = 100.0f;
  EXPECT_EQ(SafetensorsFile::open(path("z.safetensors")).get("w").to_doubles()[0], 1.0);
}

TEST_F(Safetensors, MisalignedTensorIsCopied) {
  // An F32 tensor at data offset 3 cannot be viewed in place; it must still read correctly.
  std::string data(7, '\0');
  data[0] = 9;
  const float v = -0.75f;
  std::memcpy(data.data() + 3, &v, 4);
  write_raw(path("m.safetensors"),
            R"({"pad":{"dtype":"U8","shape":[3],"data_offsets":[0,3]},)"
            R"("w":{"dtype":"F32","shape":[],"data_offsets":[3,7]}})",
            data);
  SafetensorsFile f = SafetensorsFile::open(path("m.safetensors"));
  Tensor w = f.get("w");
  EXPECT_EQ(reinterpret_cast<uintptr_t>(w.raw()) % 4, 0u);
  EXPECT_EQ(w.item(), -0.75);
  EXPECT_EQ(f.get("pad").to_doubles()[0], 9.0);
}

TEST_F(Safetensors, FormatDTypesTensorsCannotHoldAreListedButNotLoaded) {
  write_raw(path("b.safetensors"), R"({"mask":{"dtype":"BOOL","shape":[2],"data_offsets":[0,2]}})",
            std::string("\x01\x00", 2));
  SafetensorsFile f = SafetensorsFile::open(path("b.safetensors"));
  EXPECT_EQ(f.names(), std::vector<std::string>{"mask"});
  EXPECT_EQ(f.stored_dtype("mask"), "BOOL");
  expect_error([&] { f.get("mask"); }, {"b.safetensors", "'mask'", "BOOL"});
}

TEST_F(Safetensors, OverwriteReplacesTheFileAndLeavesNoTemporaries) {
  const std::string p = path("o.safetensors");
  write_safetensors(p, {{"w", Tensor::from_vector<float>({1}, {1})}});
  write_safetensors(p, {{"v", Tensor::from_vector<float>({2, 3}, {2})}});
  SafetensorsFile f = SafetensorsFile::open(p);
  EXPECT_EQ(f.names(), std::vector<std::string>{"v"});
  EXPECT_EQ(f.get("v").to_doubles(), (std::vector<double>{2, 3}));
  EXPECT_EQ(std::distance(std::filesystem::directory_iterator(dir_), {}), 1);
}

TEST_F(Safetensors, WriterRejectsBadInputAndKeepsTheOldFile) {
  const std::string p = path("k.safetensors");
  write_safetensors(p, {{"w", Tensor::from_vector<float>({5}, {1})}});
  const Tensor t = Tensor::from_vector<float>({1}, {1});
  expect_error([&] { write_safetensors(p, {{"a", t}, {"a", t}}); }, {"k.safetensors", "'a'", "twice"});
  expect_error([&] { write_safetensors(p, {{"", t}}); }, {"k.safetensors", "empty"});
  expect_error([&] { write_safetensors(p, {{"__metadata__", t}}); }, {"__metadata__", "reserved"});
  expect_error([&] { write_safetensors(path("no/such/dir/x.safetensors"), {{"a", t}}); }, {"no/such/dir"});
  EXPECT_EQ(SafetensorsFile::open(p).get("w").item(), 5.0);
  EXPECT_EQ(std::distance(std::filesystem::directory_iterator(dir_), {}), 1);
}

// ---- rejection of corrupt and hostile files --------------------------------------------------

TEST_F(Safetensors, RejectsTruncatedData) {
  const std::string p = path("trunc.safetensors");
  write_safetensors(p, {{"first", Tensor::from_vector<float>({1, 2}, {2})},
                        {"last", Tensor::from_vector<float>({3, 4}, {2})}});
  std::filesystem::resize_file(p, std::filesystem::file_size(p) - 3);
  expect_error([&] { SafetensorsFile::open(p); }, {"trunc.safetensors", "'last'", "truncated"});
}

TEST_F(Safetensors, RejectsTruncatedHeaderAndTinyFiles) {
  const std::string p = path("th.safetensors");
  write_safetensors(p, {{"w", Tensor::from_vector<float>({1, 2}, {2})}});
  std::filesystem::resize_file(p, 20);
  expect_error([&] { SafetensorsFile::open(p); }, {"th.safetensors", "header length"});
  std::filesystem::resize_file(p, 5);
  expect_error([&] { SafetensorsFile::open(p); }, {"th.safetensors", "truncated", "5 bytes"});
  expect_error([&] { SafetensorsFile::open(path("absent.safetensors")); }, {"safetensors file", "absent.safetensors", "does not exist"});
}

TEST_F(Safetensors, RejectsHeaderLengthBeyondFileOrLimit) {
  const std::string header = R"({"w":{"dtype":"U8","shape":[1],"data_offsets":[0,1]}})";
  write_raw(path("long.safetensors"), header, "x", header.size() + 2);
  expect_error([&] { SafetensorsFile::open(path("long.safetensors")); },
               {"long.safetensors", "header length", "truncated"});
  write_raw(path("huge.safetensors"), header, "x", uint64_t(1) << 40);
  expect_error([&] { SafetensorsFile::open(path("huge.safetensors")); }, {"huge.safetensors", "exceeds the limit"});
}

TEST_F(Safetensors, RejectsOffsetsOutOfRange) {
  write_raw(path("r.safetensors"), R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})", std::string(4, '\0'));
  expect_error([&] { SafetensorsFile::open(path("r.safetensors")); }, {"r.safetensors", "'w'", "[0, 8]"});
  write_raw(path("r2.safetensors"), R"({"w":{"dtype":"U8","shape":[0],"data_offsets":[3,0]}})", std::string(4, '\0'));
  expect_error([&] { SafetensorsFile::open(path("r2.safetensors")); }, {"r2.safetensors", "'w'", "end before"});
  write_raw(path("r3.safetensors"), R"({"w":{"dtype":"U8","shape":[1],"data_offsets":[0,-1]}})", "x");
  expect_error([&] { SafetensorsFile::open(path("r3.safetensors")); }, {"r3.safetensors", "'w'", "negative"});
}

TEST_F(Safetensors, RejectsOverlappingEntries) {
  write_raw(path("ov.safetensors"),
            R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
            R"("b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})",
            std::string(12, '\0'));
  expect_error([&] { SafetensorsFile::open(path("ov.safetensors")); }, {"ov.safetensors", "'b'", "overlaps", "'a'"});
}

TEST_F(Safetensors, RejectsGapsAndUnindexedBytes) {
  write_raw(path("gap.safetensors"),
            R"({"a":{"dtype":"U8","shape":[2],"data_offsets":[0,2]},)"
            R"("b":{"dtype":"U8","shape":[2],"data_offsets":[3,5]}})",
            std::string(5, '\0'));
  expect_error([&] { SafetensorsFile::open(path("gap.safetensors")); }, {"gap.safetensors", "'b'", "gap"});
  write_raw(path("tail.safetensors"), R"({"a":{"dtype":"U8","shape":[2],"data_offsets":[0,2]}})", "abcd");
  expect_error([&] { SafetensorsFile::open(path("tail.safetensors")); },
               {"tail.safetensors", "cover 2 of the 4"});
}

TEST_F(Safetensors, RejectsSizeDTypeMismatch) {
  write_raw(path("sz.safetensors"), R"({"w":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", std::string(8, '\0'));
  expect_error([&] { SafetensorsFile::open(path("sz.safetensors")); }, {"sz.safetensors", "'w'", "8 bytes", "12"});
  write_raw(path("bf.safetensors"), R"({"w":{"dtype":"BF16","shape":[4],"data_offsets":[0,16]}})",
            std::string(16, '\0'));
  expect_error([&] { SafetensorsFile::open(path("bf.safetensors")); }, {"bf.safetensors", "'w'", "BF16"});
}

TEST_F(Safetensors, RejectsBadJson) {
  write_raw(path("j.safetensors"), R"({"w":{"dtype":"F32",)", "");
  expect_error([&] { SafetensorsFile::open(path("j.safetensors")); }, {"j.safetensors", "not valid JSON"});
  write_raw(path("arr.safetensors"), "[1,2]", "");
  expect_error([&] { SafetensorsFile::open(path("arr.safetensors")); }, {"arr.safetensors", "expected an object"});
  write_raw(path("dup.safetensors"),
            R"({"w":{"dtype":"U8","shape":[1],"data_offsets":[0,1]},)"
            R"("w":{"dtype":"U8","shape":[1],"data_offsets":[1,2]}})",
            "xy");
  expect_error([&] { SafetensorsFile::open(path("dup.safetensors")); }, {"dup.safetensors", "repeats the key 'w'"});
}

TEST_F(Safetensors, RejectsUnknownDType) {
  write_raw(path("u.safetensors"), R"({"w":{"dtype":"Q7","shape":[1],"data_offsets":[0,1]}})", "x");
  expect_error([&] { SafetensorsFile::open(path("u.safetensors")); }, {"u.safetensors", "'w'", "unknown dtype 'Q7'"});
}

TEST_F(Safetensors, RejectsMalformedEntries) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {R"({"w":{"dtype":"U8","shape":[-1],"data_offsets":[0,0]}})", "negative"},
      {R"({"w":{"dtype":"U8","shape":[1.5],"data_offsets":[0,0]}})", "non-negative integer"},
      {R"({"w":{"dtype":"U8","data_offsets":[0,0]}})", "lacks 'shape'"},
      {R"({"w":{"dtype":7,"shape":[],"data_offsets":[0,1]}})", "dtype is 7"},
      {R"({"w":{"dtype":"U8","shape":[1],"data_offsets":[0]}})", "expected [begin, end]"},
      {R"({"w":[1]})", "expected an object"},
      {R"({"w":{"dtype":"F64","shape":[4294967296,4294967296],"data_offsets":[0,0]}})", "overflows"},
  };
  for (size_t i = 0; i < cases.size(); ++i) {
    SCOPED_TRACE(cases[i].first);
    const std::string p = path("bad" + std::to_string(i) + ".safetensors");
    write_raw(p, cases[i].first, "");
    const std::string file = "bad" + std::to_string(i) + ".safetensors";
    expect_error([&] { SafetensorsFile::open(p); }, {file, "'w'", cases[i].second});
  }
  write_raw(path("meta.safetensors"), R"({"__metadata__":{"step":3}})", "");
  expect_error([&] { SafetensorsFile::open(path("meta.safetensors")); }, {"meta.safetensors", "'step'", "string"});
}

// Reading a 32 MiB tensor through its view faults its file pages into the
// resident set (RssFile); drop_pages hands them back, and the view still
// reads the file's values.
TEST_F(Safetensors, DropPagesLeavesTheResidentSet) {
  const int64_t n = int64_t(8) << 20;   // 32 MiB of float32
  Tensor big = Tensor::empty({n}, DType::F32);
  for (int64_t i = 0; i < n; ++i) static_cast<float*>(big.raw())[i] = float(i % 1000);
  write_safetensors(path("big.safetensors"), {{"small", Tensor::from_vector<float>({1.0f}, {1})}, {"big", big}});
  big = Tensor();
  const SafetensorsFile f = SafetensorsFile::open(path("big.safetensors"));
  if (host_memory().rss == 0) GTEST_SKIP() << "/proc/self/status is not readable";
  const uint64_t before = host_memory().rss_file;
  const Tensor view = f.get("big");
  double sum = 0;
  for (int64_t i = 0; i < n; ++i) sum += static_cast<const float*>(view.raw())[i];
  const uint64_t touched = host_memory().rss_file;
  EXPECT_GT(touched, before + (30ull << 20)) << "reading the view should fault ~32 MiB of file pages in";
  f.drop_pages("big");
  EXPECT_LT(host_memory().rss_file, before + (1ull << 20)) << "drop_pages left the tensor's pages resident";
  EXPECT_EQ(static_cast<const float*>(view.raw())[1234], 234.0f);
  EXPECT_EQ(f.get("small").item(), 1.0);
  EXPECT_GT(sum, 0.0);
}

}  // namespace
}  // namespace bb
