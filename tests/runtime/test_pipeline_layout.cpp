// Tests for pipeline stage layouts: the seed's pp_layout syntax, the balanced
// split and the errors that name the numbers.
#include "bumblebee/runtime/pipeline_layout.h"

#include <gtest/gtest.h>

#include "bumblebee/core/error.h"

namespace {

using bb::LayerRange;
using bb::make_pipeline_layout;

std::string error_of(const std::string& layout, int64_t layers, int pp, int vpp, int64_t mtp = 0) {
  try {
    make_pipeline_layout(layout, layers, pp, vpp, mtp);
  } catch (const bb::Error& e) {
    return e.what();
  }
  return "no error";
}

void expect_pieces(const bb::PipelineLayout& l, const std::vector<LayerRange>& want) {
  ASSERT_EQ(l.pieces.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) {
    EXPECT_EQ(l.pieces[i].first_layer, want[i].first_layer) << "piece " << i;
    EXPECT_EQ(l.pieces[i].end_layer, want[i].end_layer) << "piece " << i;
    EXPECT_EQ(l.pieces[i].pre_process, want[i].pre_process) << "piece " << i;
    EXPECT_EQ(l.pieces[i].post_process, want[i].post_process) << "piece " << i;
  }
}

TEST(PipelineLayout, SeedSyntax) {
  const bb::PipelineLayout l = make_pipeline_layout("E|t*5|t*6|t,L", 12, 4, 1);
  expect_pieces(l, {{0, 0, true, false}, {0, 5, false, false}, {5, 11, false, false}, {11, 12, false, true}});
}

TEST(PipelineLayout, ItemsWithLayersAndVirtualStagesInMegatronOrder) {
  // pp 2, vpp 2: pieces 0, 1 are virtual stage 0 of ranks 0, 1; pieces 2, 3 virtual stage 1.
  const bb::PipelineLayout l = make_pipeline_layout("E,t*2|t|t | t*2,L", 6, 2, 2);
  expect_pieces(l, {{0, 2, true, false}, {2, 3, false, false}, {3, 4, false, false}, {4, 6, false, true}});
  EXPECT_EQ(l.piece(1, 0).first_layer, 2);
  EXPECT_EQ(l.piece(0, 1).first_layer, 3);
  EXPECT_TRUE(l.piece(1, 1).post_process);
}

TEST(PipelineLayout, BalancedSplitGivesEarlierStagesTheRemainder) {
  expect_pieces(make_pipeline_layout("", 8, 4, 1),
                {{0, 2, true, false}, {2, 4, false, false}, {4, 6, false, false}, {6, 8, false, true}});
  expect_pieces(make_pipeline_layout("", 7, 2, 2),
                {{0, 2, true, false}, {2, 4, false, false}, {4, 6, false, false}, {6, 7, false, true}});
  expect_pieces(make_pipeline_layout("", 3, 1, 1), {{0, 3, true, true}});
}

TEST(PipelineLayout, MtpLayersGoWithTheLossHead) {
  expect_pieces(make_pipeline_layout("E,t|t,m,L", 2, 2, 1, 1), {{0, 1, true, false}, {1, 2, false, true}});
  expect_pieces(make_pipeline_layout("E,t*2|m*2,L", 2, 2, 1, 2), {{0, 2, true, false}, {2, 2, false, true}});
  expect_pieces(make_pipeline_layout("", 4, 2, 1, 1), {{0, 2, true, false}, {2, 4, false, true}});
}

TEST(PipelineLayout, ErrorsNameTheNumbers) {
  EXPECT_NE(error_of("E,t*5|t*6,L", 12, 2, 1).find("places 11 decoder layers, but the model has num_hidden_layers = 12"),
            std::string::npos);
  EXPECT_NE(error_of("E,t|t|t,L", 3, 2, 1).find("has 3 stages, but pp * vpp = 2 (pp 2, vpp 1)"), std::string::npos);
  EXPECT_NE(error_of("E,t||t,L", 2, 3, 1).find("stage 1 (''): the stage is empty"), std::string::npos);
  EXPECT_NE(error_of("t,E|t,L", 2, 2, 1).find("E (the embedding) must come once, first"), std::string::npos);
  EXPECT_NE(error_of("t|E,t,L", 2, 2, 1).find("E (the embedding) must be in stage 0 and only there; stage 0 lacks it"),
            std::string::npos);
  EXPECT_NE(error_of("E,t,L|t", 2, 2, 1).find("L (the loss head) must be in the last stage 1 and only there; stage 0 has it"),
            std::string::npos);
  EXPECT_NE(error_of("E,t|L,t", 2, 2, 1).find("L (the loss head) must be the last item"), std::string::npos);
  EXPECT_NE(error_of("E,t|t,m,L", 2, 2, 1).find("places 1 MTP layers (m), but the model has num_nextn_predict_layers = 0"),
            std::string::npos);
  EXPECT_NE(error_of("E,t,m|t,L", 2, 2, 1, 1).find("m (MTP layers) must be in the last stage, before L"),
            std::string::npos);
  EXPECT_NE(error_of("E,t|m,t,L", 2, 2, 1, 1).find("m (MTP layers) must follow the stage's decoder layers"),
            std::string::npos);
  EXPECT_NE(error_of("E,t|t,L", 2, 2, 1, 1).find("places 0 MTP layers (m), but the model has "
                                               "num_nextn_predict_layers = 1; write them as m*N before L"),
            std::string::npos);
  EXPECT_NE(error_of("E,x|t,L", 2, 2, 1).find("unknown item 'x'"), std::string::npos);
  EXPECT_NE(error_of("E,t*|t,L", 2, 2, 1).find("'t*' needs a count"), std::string::npos);
  EXPECT_NE(error_of("", 3, 2, 2).find("num_hidden_layers 3 cannot fill pp * vpp = 4"), std::string::npos);
  EXPECT_NE(error_of("", 4, 1, 2).find("vpp = 2 > 1 needs pp > 1"), std::string::npos);
}

}  // namespace
