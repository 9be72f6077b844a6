// IndexedDataset reader against .idx/.bin files built byte by byte from the documented Megatron layout.
#include "bumblebee/data/indexed_dataset.h"

#include <gtest/gtest.h>

#include <vector>

#include "data_test_support.h"

using bb::test::error_message;
using bb::test::TempDir;
using bb::test::write_file;

namespace {

// Little-endian bytes of v, spelled out so the test does not share the reader's memcpy path.
void le(std::string& out, uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) out.push_back(char((v >> (8 * i)) & 0xFF));
}

std::string idx_bytes(uint8_t dtype_code, const std::vector<int32_t>& lengths, const std::vector<int64_t>& pointers,
                      const std::vector<int64_t>& doc_indices) {
  std::string b("MMIDIDX\0\0", 9);
  le(b, 1, 8);   // version
  le(b, dtype_code, 1);
  le(b, lengths.size(), 8);
  le(b, doc_indices.size(), 8);
  for (int32_t l : lengths) le(b, uint32_t(l), 4);
  for (int64_t p : pointers) le(b, uint64_t(p), 8);
  for (int64_t d : doc_indices) le(b, uint64_t(d), 8);
  return b;
}

// Three sequences (lengths 3, 0, 2) in two documents ({0, 1}, {2}), uint16 tokens.
struct SmallDataset {
  TempDir dir;
  std::string prefix = dir / "small";
  std::string idx = idx_bytes(8, {3, 0, 2}, {0, 6, 6}, {0, 2, 3});
  std::string bin;
  SmallDataset() {
    for (uint16_t t : {7, 65535, 300, 1, 2}) le(bin, t, 2);
    write_file(prefix + ".idx", idx);
    write_file(prefix + ".bin", bin);
  }
};

}  // namespace

TEST(IndexedDataset, ReadsHandBuiltUint16Dataset) {
  SmallDataset s;
  ASSERT_EQ(s.idx.size(), 34u + 3 * 4 + 3 * 8 + 3 * 8);
  const bb::IndexedDataset ds(s.prefix);
  EXPECT_EQ(ds.dtype(), bb::IndexedDType::UInt16);
  EXPECT_EQ(ds.sequence_count(), 3);
  EXPECT_EQ(ds.document_count(), 2);
  EXPECT_EQ(ds.total_tokens(), 5);
  EXPECT_EQ(ds.sequence_length(0), 3);
  EXPECT_EQ(ds.sequence_pointer(2), 6);
  EXPECT_EQ(ds.document_index(1), 2);
  EXPECT_EQ(ds.get(0), (std::vector<int64_t>{7, 65535, 300}));
  EXPECT_EQ(ds.get(1), std::vector<int64_t>{});
  EXPECT_EQ(ds.get(2), (std::vector<int64_t>{1, 2}));
  EXPECT_EQ(ds.get(0, 1, 1), std::vector<int64_t>{65535});
  EXPECT_NE(error_message([&] { ds.get(0, 2, 2); }).find("out of range for sequence 0 of length 3"),
            std::string::npos);
}

TEST(IndexedDataset, ReadsInt32Tokens) {
  TempDir dir;
  std::string bin;
  for (int32_t t : {100000, -1, 5}) le(bin, uint32_t(t), 4);
  write_file(dir / "i32.bin", bin);
  write_file(dir / "i32.idx", idx_bytes(4, {1, 2}, {0, 4}, {0, 1, 2}));
  const bb::IndexedDataset ds(dir / "i32");
  EXPECT_EQ(ds.dtype(), bb::IndexedDType::Int32);
  EXPECT_EQ(ds.get(0), std::vector<int64_t>{100000});
  EXPECT_EQ(ds.get(1), (std::vector<int64_t>{-1, 5}));
  EXPECT_NE(error_message([&] { ds.check_vocab(200000); }).find("sequence 1 holds token -1 at position 0"),
            std::string::npos);
}

TEST(IndexedDataset, CheckVocabNamesTheToken) {
  SmallDataset s;
  const bb::IndexedDataset ds(s.prefix);
  EXPECT_NO_THROW(ds.check_vocab(65536));
  const std::string msg = error_message([&] { ds.check_vocab(2048); });
  EXPECT_NE(msg.find("small.bin: sequence 0 holds token 65535 at position 1, outside the model's vocabulary of 2048"),
            std::string::npos)
      << msg;
}

TEST(IndexedDataset, RejectsCorruptIndex) {
  SmallDataset s;
  auto open_error = [&](const std::string& idx) {
    write_file(s.prefix + ".idx", idx);
    return error_message([&] { bb::IndexedDataset ds(s.prefix); });
  };
  std::string bad_magic = s.idx;
  bad_magic[0] = 'X';
  EXPECT_NE(open_error(bad_magic).find("small.idx: not a Megatron indexed dataset index"), std::string::npos);
  EXPECT_NE(open_error(s.idx.substr(0, 20)).find("small.idx: truncated index: 20 bytes"), std::string::npos);
  EXPECT_NE(open_error(s.idx.substr(0, s.idx.size() - 8)).find("truncated index"), std::string::npos);
  EXPECT_NE(open_error(s.idx + "x").find("1 unexpected bytes"), std::string::npos);
  std::string v2 = s.idx;
  v2[9] = 2;
  EXPECT_NE(open_error(v2).find("index version 2"), std::string::npos);
  std::string code = s.idx;
  code[17] = 9;
  EXPECT_NE(open_error(code).find("unknown dtype code 9"), std::string::npos);
  code[17] = 6;
  EXPECT_NE(open_error(code).find("dtype float64 cannot hold token ids"), std::string::npos);
  EXPECT_NE(open_error(idx_bytes(8, {3, 0, 2}, {0, 6, 6}, {0, 2, 2})).find("document_indices ends at 2"),
            std::string::npos);
  EXPECT_NE(open_error(idx_bytes(8, {3, 0, 2}, {0, 6, 8}, {0, 2, 3})).find("sequence 2 starts at byte 8"),
            std::string::npos);
  // A header that claims far more entries than the file holds.
  std::string huge = s.idx;
  huge[25] = 0x7F;
  EXPECT_NE(open_error(huge).find("more than a"), std::string::npos);
}

TEST(IndexedDataset, RejectsBinOfWrongSize) {
  SmallDataset s;
  write_file(s.prefix + ".bin", s.bin.substr(0, 8));
  EXPECT_NE(error_message([&] { bb::IndexedDataset ds(s.prefix); }).find("the .bin is truncated"), std::string::npos);
  write_file(s.prefix + ".bin", s.bin + "zz");
  EXPECT_NE(error_message([&] { bb::IndexedDataset ds(s.prefix); }).find("the .bin has extra bytes"),
            std::string::npos);
  EXPECT_NE(error_message([&] { bb::IndexedDataset ds(s.dir / "missing"); }).find("missing.idx does not exist"), std::string::npos);
}

TEST(IndexedDataset, DtypeForVocab) {
  EXPECT_EQ(bb::indexed_dtype_for_vocab(65499), bb::IndexedDType::UInt16);
  EXPECT_EQ(bb::indexed_dtype_for_vocab(65500), bb::IndexedDType::Int32);
  EXPECT_EQ(bb::indexed_dtype_for_vocab(151936), bb::IndexedDType::Int32);
  EXPECT_STREQ(bb::indexed_dtype_name(bb::IndexedDType::UInt16), "uint16");
}
