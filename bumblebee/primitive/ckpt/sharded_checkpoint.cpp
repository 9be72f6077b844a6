// Sharded checkpoints: the per-rank save with its ownership rule, the metadata, and the box reader.
#include "bumblebee/primitive/ckpt/sharded_checkpoint.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <limits>
#include <set>
#include <tuple>

#include "bumblebee/core/input_file.h"

namespace bb {

namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

constexpr const char* kFormat = "bumblebee-sharded-1";

std::string rank_file(const char* stem, int rank, const char* ext) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%s-%05d.%s", stem, rank, ext);
  return buf;
}

std::string piece_name(const TensorPiece& p) {
  std::string s = p.key + "@";
  for (size_t d = 0; d < p.box.offsets.size(); ++d) {
    if (d) s += ',';
    s += std::to_string(p.box.offsets[d]);
  }
  return s;
}

// What a plan records of a piece; its identity for the ownership rule is (key, box).
json plan_entry(const TensorPiece& p) {
  return {{"key", p.key}, {"shape", p.global_shape}, {"dtype", dtype_name(p.data.dtype())},
          {"offsets", p.box.offsets}, {"extent", p.box.extent}, {"name", piece_name(p)}};
}

using PieceId = std::tuple<std::string, Shape, Shape>;
PieceId piece_id(const json& e) {
  return {e.at("key").get<std::string>(), e.at("offsets").get<Shape>(), e.at("extent").get<Shape>()};
}

json read_json(const std::string& path, const char* what) {
  const std::string text = read_input_file(path, what);
  try {
    return json::parse(text);
  } catch (const json::exception& e) {
    BB_FAIL(path, " is not valid JSON: ", e.what());
  }
}

void write_json(const std::string& path, const json& j) {
  const std::string text = j.dump(1) + "\n";
  write_file_atomically(path, {{text.data(), text.size()}});
}

bool overlap(const TensorBox& a, const TensorBox& b) { return box_intersection(a, b).numel() > 0; }

}  // namespace

void save_sharded_tensors(const std::string& dir, const std::vector<TensorPiece>& pieces,
                          dist::Communicator& world) {
  const int rank = world.rank();
  json plan = json::array();
  for (const TensorPiece& p : pieces) {
    BB_CHECK(p.data.numel() == p.box.numel() && p.box.offsets.size() == p.global_shape.size(), "piece ",
             box_str(p.box), " of '", p.key, "' holds ", p.data.numel(), " elements for a box of ", p.box.numel(),
             " in a tensor of shape ", shape_str(p.global_shape));
    plan.push_back(plan_entry(p));
  }
  write_json(dir + "/" + rank_file("plan", rank, "json"), plan);
  world.barrier();

  // A piece is this rank's to write unless a lower rank holds the same one.
  std::set<PieceId> lower;
  for (int r = 0; r < rank; ++r)
    for (const json& e : read_json(dir + "/" + rank_file("plan", r, "json"), "checkpoint plan")) lower.insert(piece_id(e));
  std::vector<const TensorPiece*> mine;
  for (size_t i = 0; i < pieces.size(); ++i)
    if (!lower.count(piece_id(plan[i]))) mine.push_back(&pieces[i]);
  // Largest elements first: every piece then starts aligned and maps without a copy.
  std::stable_sort(mine.begin(), mine.end(), [](const TensorPiece* a, const TensorPiece* b) {
    return dtype_size(a->data.dtype()) > dtype_size(b->data.dtype());
  });
  if (!mine.empty()) {
    SafetensorsStreamWriter w(dir + "/" + rank_file("rank", rank, "safetensors"), {{"format", "pt"}});
    for (const TensorPiece* p : mine) w.add(piece_name(*p), p->data.view(p->box.extent));
    w.close();
  }
  world.barrier();
  if (rank != 0) return;

  json tensors = json::object(), files = json::object();
  std::set<PieceId> seen;
  for (int r = 0; r < world.size(); ++r) {
    const std::string plan_path = dir + "/" + rank_file("plan", r, "json");
    const std::string file = rank_file("rank", r, "safetensors");
    for (const json& e : read_json(plan_path, "checkpoint plan")) {
      if (!seen.insert(piece_id(e)).second) continue;
      json& t = tensors[e.at("key").get<std::string>()];
      if (t.is_null()) t = {{"shape", e.at("shape")}, {"dtype", e.at("dtype")}, {"shards", json::array()}};
      BB_CHECK(t.at("shape") == e.at("shape") && t.at("dtype") == e.at("dtype"), "checkpoint ", dir, ": rank ", r,
               " holds tensor '", e.at("key").get<std::string>(), "' as ", e.at("dtype").dump(), e.at("shape").dump(),
               ", a lower rank as ", t.at("dtype").dump(), t.at("shape").dump());
      t.at("shards").push_back({{"file", file}, {"name", e.at("name")}, {"offsets", e.at("offsets")},
                                {"extent", e.at("extent")}});
      if (!files.contains(file)) {
        const FileChecksum s = checksum_file(dir + "/" + file);
        files[file] = {{"bytes", s.bytes}, {"crc32c", s.crc32c}};
      }
    }
    fs::remove(plan_path);
  }
  const json metadata = {{"format", kFormat}, {"files", files}, {"tensors", tensors}};
  check_sharded_metadata(metadata, dir + "/" + kShardedMetadataFile);
  write_json(dir + "/" + kShardedMetadataFile, metadata);
}

namespace {
// The parsed and validated metadata.
struct Parsed {
  std::map<std::string, FileChecksum> files;
  std::map<std::string, std::tuple<Shape, DType, std::vector<std::tuple<std::string, std::string, TensorBox>>>> tensors;
};

// JSON numbers from outside, read strictly: a float or an integer out of range
// is an error (json's own get<> would convert or wrap it).
int64_t integer_of(const json& v, const std::string& source, const std::string& what, int64_t lo, int64_t hi) {
  const bool fits = v.is_number_unsigned() ? v.get<uint64_t>() <= uint64_t(hi)
                    : v.is_number_integer() ? v.get<int64_t>() >= lo && v.get<int64_t>() <= hi
                                            : false;
  BB_CHECK(fits, source, ": ", what, " must be an integer in [", lo, ", ", hi, "], got ", v.dump());
  return v.is_number_unsigned() ? int64_t(v.get<uint64_t>()) : v.get<int64_t>();
}

Shape dims_of(const json& v, const std::string& source, const std::string& what) {
  BB_CHECK(v.is_array(), source, ": ", what, " must be an array of integers, got ", v.dump());
  Shape out;
  for (const json& d : v) out.push_back(integer_of(d, source, what, 0, std::numeric_limits<int64_t>::max()));
  return out;
}

Parsed parse_metadata(const json& m, const std::string& source) {
  Parsed out;
  try {
    BB_CHECK(m.is_object() && m.value("format", "") == kFormat, source, ": not a sharded checkpoint metadata file (",
             "expected \"format\": \"", kFormat, "\")");
    for (const auto& [file, f] : m.at("files").items()) {
      // The metadata comes from outside: it must not reach files beyond its folder.
      BB_CHECK(!file.empty() && fs::path(file).filename() == file && file != "." && file != "..", source,
               ": file '", file, "' is not a plain file name in the checkpoint folder");
      const std::string what = "file '" + file + "'";
      out.files[file] = {uint64_t(integer_of(f.at("bytes"), source, what + " bytes", 0, std::numeric_limits<int64_t>::max())),
                         uint32_t(integer_of(f.at("crc32c"), source, what + " crc32c", 0, 0xffffffffll))};
    }
    for (const auto& [key, t] : m.at("tensors").items()) {
      const Shape shape = dims_of(t.at("shape"), source, "the shape of tensor '" + key + "'");
      shape_numel(shape);   // fails naming the shape when its element count overflows
      const DType dtype = dtype_from_name(t.at("dtype").get<std::string>());
      std::vector<std::tuple<std::string, std::string, TensorBox>> pieces;
      int64_t covered = 0;
      for (const json& s : t.at("shards")) {
        const std::string file = s.at("file").get<std::string>();
        BB_CHECK(out.files.count(file), source, ": a piece of tensor '", key, "' is in '", file,
                 "', which the metadata does not list");
        const std::string what = "a piece of tensor '" + key + "'";
        const TensorBox box{dims_of(s.at("offsets"), source, what + ": offsets"),
                            dims_of(s.at("extent"), source, what + ": extent")};
        bool inside = box.offsets.size() == shape.size() && box.extent.size() == shape.size();
        for (size_t d = 0; inside && d < shape.size(); ++d)   // offset <= shape - extent: no overflowing sum
          inside = box.extent[d] <= shape[d] && box.offsets[d] <= shape[d] - box.extent[d];
        BB_CHECK(inside, source, ": piece ", s.dump(), " of tensor '", key, "' lies outside its shape ",
                 shape_str(shape));
        for (const auto& other : pieces)
          BB_CHECK(!overlap(box, std::get<2>(other)), source, ": pieces ", box_str(box), " and ",
                   box_str(std::get<2>(other)), " of tensor '", key, "' overlap");
        covered += box.numel();
        pieces.emplace_back(file, s.at("name").get<std::string>(), box);
      }
      BB_CHECK(covered == shape_numel(shape), source, ": the pieces of tensor '", key, "' cover ", covered, " of its ",
               shape_numel(shape), " elements (a piece is missing)");
      out.tensors[key] = {shape, dtype, std::move(pieces)};
    }
  } catch (const json::exception& e) {
    BB_FAIL(source, " is not valid sharded checkpoint metadata: ", e.what());
  }
  return out;
}
}  // namespace

void check_sharded_metadata(const json& metadata, const std::string& source) { parse_metadata(metadata, source); }

ShardedCheckpoint ShardedCheckpoint::open(const std::string& dir) {
  const std::string path = dir + "/" + kShardedMetadataFile;
  BB_CHECK(fs::is_regular_file(path), "sharded checkpoint ", dir, ": ", kShardedMetadataFile, " is missing");
  Parsed p = parse_metadata(read_json(path, "sharded checkpoint metadata"), path);
  ShardedCheckpoint ck;
  ck.dir_ = dir;
  ck.files_ = std::move(p.files);
  for (auto& [key, t] : p.tensors) {
    Entry& e = ck.tensors_[key];
    e.shape = std::get<0>(t);
    e.dtype = std::get<1>(t);
    for (auto& [file, name, box] : std::get<2>(t)) e.pieces.push_back({file, name, box});
  }
  return ck;
}

std::vector<std::string> ShardedCheckpoint::keys() const {
  std::vector<std::string> out;
  for (const auto& kv : tensors_) out.push_back(kv.first);
  return out;
}

bool ShardedCheckpoint::has(const std::string& key) const { return tensors_.count(key) != 0; }

const ShardedCheckpoint::Entry& ShardedCheckpoint::entry(const std::string& key) const {
  const auto it = tensors_.find(key);
  BB_CHECK(it != tensors_.end(), "sharded checkpoint ", dir_, ": ", kShardedMetadataFile, " has no tensor '", key,
           "'");
  return it->second;
}

const Shape& ShardedCheckpoint::shape(const std::string& key) const { return entry(key).shape; }
DType ShardedCheckpoint::dtype(const std::string& key) const { return entry(key).dtype; }

const SafetensorsFile& ShardedCheckpoint::file(const std::string& name) {
  if (const auto it = opened_.find(name); it != opened_.end()) return it->second;
  const std::string path = dir_ + "/" + name;
  const FileChecksum& want = files_.at(name);
  BB_CHECK(fs::is_regular_file(path), "sharded checkpoint file ", path, " is missing");
  const FileChecksum got = checksum_file(path);
  BB_CHECK(got.bytes == want.bytes, "sharded checkpoint file ", path, " is ", got.bytes, " bytes, ",
           kShardedMetadataFile, " records ", want.bytes);
  BB_CHECK(got.crc32c == want.crc32c, "sharded checkpoint file ", path, " is corrupt: its CRC-32C is ",
           crc32c_hex(got.crc32c), ", ", kShardedMetadataFile, " records ", crc32c_hex(want.crc32c));
  return opened_.emplace(name, SafetensorsFile::open(path)).first->second;
}

void ShardedCheckpoint::read(const std::string& key, const TensorBox& box, Tensor& out) {
  const Entry& e = entry(key);
  BB_CHECK(box.offsets.size() == e.shape.size(), "sharded checkpoint ", dir_, ": tensor '", key, "' has shape ",
           shape_str(e.shape), ", box ", box_str(box), " asked for");
  BB_CHECK(out.numel() == box.numel(), "sharded checkpoint read of '", key, "' ", box_str(box), " into ",
           out.numel(), " elements");
  Tensor host = Tensor::empty(box.extent, e.dtype);
  const size_t es = dtype_size(e.dtype);
  int64_t covered = 0;
  for (const Piece& p : e.pieces) {
    const TensorBox region = box_intersection(p.box, box);
    if (region.numel() == 0 && !box.extent.empty()) continue;
    const SafetensorsFile& f = file(p.file);
    BB_CHECK(f.has(p.name) && f.shape(p.name) == p.box.extent && f.dtype(p.name) == e.dtype, "sharded checkpoint file ",
             f.path(), " lacks piece '", p.name, "' as ", dtype_name(e.dtype), shape_str(p.box.extent),
             " that ", kShardedMetadataFile, " records");
    const Tensor src = f.get(p.name);
    copy_box_region(src.raw(), p.box, host.raw(), box, region, es);
    covered += region.numel();
  }
  BB_CHECK(covered == box.numel(), "sharded checkpoint ", dir_, ": the pieces of '", key, "' cover ", covered, " of ",
           box.numel(), " elements of ", box_str(box));
  out.copy_from(host);
}

}  // namespace bb
