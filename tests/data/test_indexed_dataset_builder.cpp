// IndexedDatasetBuilder: its bytes equal the documented Megatron layout, and failures leave no files.
#include "bumblebee/data/indexed_dataset_builder.h"

#include <gtest/gtest.h>

#include <filesystem>

#include "data_test_support.h"

using bb::test::error_message;
using bb::test::read_file;
using bb::test::TempDir;

namespace {
void le(std::string& out, uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) out.push_back(char((v >> (8 * i)) & 0xFF));
}
}  // namespace

TEST(IndexedDatasetBuilder, WritesTheDocumentedBytes) {
  TempDir dir;
  const std::string prefix = dir / "out";
  {
    bb::IndexedDatasetBuilder b(prefix, bb::IndexedDType::UInt16);
    b.add_document(std::vector<int64_t>{10, 20, 30});
    b.add_sequence(std::vector<int32_t>{40});       // a document of two sequences
    b.add_sequence(std::vector<int32_t>{50, 60});
    b.end_document();
    EXPECT_EQ(b.total_tokens(), 6);
    b.finalize();
  }
  std::string idx("MMIDIDX\0\0", 9);
  le(idx, 1, 8);
  le(idx, 8, 1);   // uint16
  le(idx, 3, 8);   // sequences
  le(idx, 3, 8);   // document_indices entries: 2 documents + 1
  for (uint32_t l : {3, 1, 2}) le(idx, l, 4);
  for (uint64_t p : {0, 6, 8}) le(idx, p, 8);
  for (uint64_t d : {0, 1, 3}) le(idx, d, 8);
  EXPECT_EQ(read_file(prefix + ".idx"), idx);
  std::string bin;
  for (uint16_t t : {10, 20, 30, 40, 50, 60}) le(bin, t, 2);
  EXPECT_EQ(read_file(prefix + ".bin"), bin);

  const bb::IndexedDataset ds(prefix);
  EXPECT_EQ(ds.document_count(), 2);
  EXPECT_EQ(ds.get(2), (std::vector<int64_t>{50, 60}));
  // Only the two outputs remain: the temporaries were renamed, not copied.
  EXPECT_EQ(std::distance(std::filesystem::directory_iterator(dir.path()), std::filesystem::directory_iterator()), 2);
}

TEST(IndexedDatasetBuilder, Int32RoundTrip) {
  TempDir dir;
  {
    bb::IndexedDatasetBuilder b(dir / "w", bb::IndexedDType::Int32);
    b.add_document(std::vector<int64_t>{151935, 0, 70000});
    b.finalize();
  }
  const bb::IndexedDataset ds(dir / "w");
  EXPECT_EQ(ds.dtype(), bb::IndexedDType::Int32);
  EXPECT_EQ(ds.get(0), (std::vector<int64_t>{151935, 0, 70000}));
}

TEST(IndexedDatasetBuilder, RejectsTokensOutsideTheDtype) {
  TempDir dir;
  bb::IndexedDatasetBuilder b(dir / "x", bb::IndexedDType::UInt16);
  b.add_document(std::vector<int64_t>{1});
  const std::string msg = error_message([&] { b.add_document(std::vector<int64_t>{5, 70000}); });
  EXPECT_NE(msg.find("token 70000 at position 1 of document 1 does not fit"), std::string::npos) << msg;
  EXPECT_NE(error_message([&] { b.add_document(std::vector<int64_t>{-1}); }).find("token -1"), std::string::npos);
}

TEST(IndexedDatasetBuilder, AbandonedOrUnfinishedBuildsLeaveNothing) {
  TempDir dir;
  {
    bb::IndexedDatasetBuilder b(dir / "gone", bb::IndexedDType::UInt16);
    b.add_document(std::vector<int64_t>{1, 2, 3});
  }
  EXPECT_TRUE(std::filesystem::is_empty(dir.path()));
  {
    bb::IndexedDatasetBuilder b(dir / "open", bb::IndexedDType::UInt16);
    b.add_sequence(std::vector<int64_t>{1});
    EXPECT_NE(error_message([&] { b.finalize(); }).find("1 sequences were added after the last end_document()"),
              std::string::npos);
  }
  EXPECT_TRUE(std::filesystem::is_empty(dir.path()));
}

TEST(IndexedDatasetBuilder, ReplacesAnOlderDataset) {
  TempDir dir;
  for (int64_t n : {5, 2}) {
    bb::IndexedDatasetBuilder b(dir / "d", bb::IndexedDType::UInt16);
    b.add_document(std::vector<int64_t>(size_t(n), 7));
    b.finalize();
  }
  EXPECT_EQ(bb::IndexedDataset(dir / "d").total_tokens(), 2);
}
