// Parsing and balancing of pipeline stage layouts.
#include "bumblebee/runtime/pipeline_layout.h"

#include <cctype>

#include "bumblebee/core/error.h"

namespace bb {

namespace {

struct Piece {
  bool embedding = false, loss = false;
  int64_t layers = 0, mtp = 0;
};

// One piece's items ("E,t*5" or "t,L"); `where` names it for errors.
Piece parse_piece(const std::string& text, const std::string& layout, size_t index) {
  Piece p;
  size_t i = 0;
  int item = 0;
  auto fail_where = [&](const std::string& why) {
    BB_FAIL("pp_layout '", layout, "': stage ", index, " ('", text, "'): ", why);
  };
  while (i < text.size()) {
    const char c = text[i];
    if (c == ',' || std::isspace(static_cast<unsigned char>(c))) {
      ++i;
      continue;
    }
    ++i;
    int64_t count = 1;
    if (i < text.size() && text[i] == '*') {
      ++i;
      const size_t digits = i;
      while (i < text.size() && std::isdigit(static_cast<unsigned char>(text[i]))) ++i;
      if (i == digits) fail_where(std::string("'") + c + "*' needs a count");
      count = std::stoll(text.substr(digits, i - digits));
      if (count < 1) fail_where(std::string("'") + c + "*" + std::to_string(count) + "' needs a count >= 1");
    }
    switch (c) {
      case 'E':
        if (item != 0 || count != 1) fail_where("E (the embedding) must come once, first");
        p.embedding = true;
        break;
      case 't':
        if (p.loss) fail_where("L (the loss head) must be the last item");
        if (p.mtp > 0) fail_where("m (MTP layers) must follow the stage's decoder layers");
        p.layers += count;
        break;
      case 'L':
        if (p.loss || count != 1) fail_where("L (the loss head) must come once");
        p.loss = true;
        break;
      case 'm':
        if (p.loss) fail_where("L (the loss head) must be the last item");
        p.mtp += count;
        break;
      default:
        fail_where(std::string("unknown item '") + c + "' (expected E, t, t*N, m, m*N, L)");
    }
    ++item;
  }
  if (item == 0) fail_where("the stage is empty");
  if (p.layers == 0 && p.embedding == p.loss)
    fail_where("the stage holds no decoder layer");   // E-only and L-only stages are fine, an empty one is not
  return p;
}

std::vector<Piece> parse_layout(const std::string& layout) {
  std::vector<Piece> pieces;
  size_t begin = 0;
  while (true) {
    const size_t bar = layout.find('|', begin);
    const std::string text = layout.substr(begin, bar == std::string::npos ? std::string::npos : bar - begin);
    pieces.push_back(parse_piece(text, layout, pieces.size()));
    if (bar == std::string::npos) break;
    begin = bar + 1;
  }
  return pieces;
}

}  // namespace

PipelineLayout make_pipeline_layout(const std::string& pp_layout, int64_t num_layers, int pp, int vpp,
                                    int64_t mtp_layers) {
  BB_CHECK(pp >= 1 && vpp >= 1, "pipeline sizes must be >= 1: pp ", pp, ", vpp ", vpp);
  BB_CHECK(vpp == 1 || pp > 1, "vpp = ", vpp, " > 1 needs pp > 1 (virtual stages interleave pipeline ranks)");
  const int64_t n = int64_t(pp) * vpp;
  std::vector<Piece> pieces;
  if (pp_layout.empty()) {
    BB_CHECK(num_layers >= n, "num_hidden_layers ", num_layers, " cannot fill pp * vpp = ", n,
             " pipeline stages (pp ", pp, ", vpp ", vpp, ") with at least one layer each");
    for (int64_t i = 0; i < n; ++i) pieces.push_back({i == 0, i == n - 1, num_layers / n + (i < num_layers % n)});
  } else {
    pieces = parse_layout(pp_layout);
    BB_CHECK(int64_t(pieces.size()) == n, "pp_layout '", pp_layout, "' has ", pieces.size(),
             " stages, but pp * vpp = ", n, " (pp ", pp, ", vpp ", vpp, ")");
    int64_t total = 0, mtp = 0;
    for (size_t i = 0; i < pieces.size(); ++i) {
      total += pieces[i].layers;
      mtp += pieces[i].mtp;
      BB_CHECK(pieces[i].mtp == 0 || pieces[i].loss, "pp_layout '", pp_layout, "': m (MTP layers) must be in the ",
               "last stage, before L: they take the main model's final hidden states; stage ", i, " has ",
               pieces[i].mtp);
      BB_CHECK(pieces[i].embedding == (i == 0), "pp_layout '", pp_layout, "': E (the embedding) must be in stage 0 ",
               "and only there; stage ", i, (pieces[i].embedding ? " has it" : " lacks it"));
      BB_CHECK(pieces[i].loss == (i + 1 == pieces.size()), "pp_layout '", pp_layout, "': L (the loss head) must be in ",
               "the last stage ", pieces.size() - 1, " and only there; stage ", i, (pieces[i].loss ? " has it" : " lacks it"));
    }
    BB_CHECK(total == num_layers, "pp_layout '", pp_layout, "' places ", total, " decoder layers, but the model has ",
             "num_hidden_layers = ", num_layers);
    BB_CHECK(mtp == mtp_layers, "pp_layout '", pp_layout, "' places ", mtp, " MTP layers (m), but the model has ",
             "num_nextn_predict_layers = ", mtp_layers, mtp_layers > 0 ? "; write them as m*N before L" : "");
  }
  PipelineLayout out;
  out.pp = pp;
  out.vpp = vpp;
  int64_t first = 0;
  for (const Piece& p : pieces) {
    out.pieces.push_back(LayerRange{first, first + p.layers, p.embedding, p.loss});
    first += p.layers;
  }
  return out;
}

}  // namespace bb
