// Tests, CPU: pure index maps the kernels share, host-callable. The forward tile orders of
// src/cuda/common/tile_scheduler.cuh: every order must visit each (q-block, head, batch) tile
// exactly once, the causal order must run longest first within each group, and the persistent
// rounds must hand every index to exactly one CTA. The sm90 backward's rotated q-block order must
// visit every q block once per kv block and give the dQ adds of each q block the order the kv
// blocks reach it. The intervals of src/common/mask.h (keys a
// row sees, rows that see a key) must hold exactly the pairs Mask::visible accepts.
#include <gtest/gtest.h>

#include <cstdint>
#include <tuple>
#include <vector>

#include "common/mask.h"
#include "cuda/common/tile_scheduler.cuh"
#include "cuda/sm90/bwd_order.h"

namespace {

using fa::cuda::FwdTile;
using fa::cuda::LongestFirstScheduler;

struct Grid {
  int m_blocks, heads, batch;
  int tiles() const { return m_blocks * heads * batch; }
  int index(const FwdTile& t) const { return (t.batch * heads + t.head) * m_blocks + t.m_block; }
};

const Grid kGrids[] = {{1, 1, 1}, {4, 16, 32}, {128, 16, 1}, {7, 3, 5}, {32, 16, 4}, {2, 1, 9}};

void expect_in_range(const Grid& g, const FwdTile& t) {
  ASSERT_GE(t.m_block, 0);
  ASSERT_LT(t.m_block, g.m_blocks);
  ASSERT_GE(t.head, 0);
  ASSERT_LT(t.head, g.heads);
  ASSERT_GE(t.batch, 0);
  ASSERT_LT(t.batch, g.batch);
}

TEST(TileOrder, BatchHeadMajorVisitsEveryTileOnce) {
  for (const Grid& g : kGrids) {
    std::vector<int> seen(g.tiles(), 0);
    for (int idx = 0; idx < g.tiles(); ++idx) {
      const FwdTile t = LongestFirstScheduler::tile(idx, g.m_blocks, g.heads);
      ASSERT_NO_FATAL_FAILURE(expect_in_range(g, t));
      ++seen[g.index(t)];
      if (idx % g.m_blocks != 0) {  // within a (batch, head): q-blocks descending
        const FwdTile prev = LongestFirstScheduler::tile(idx - 1, g.m_blocks, g.heads);
        EXPECT_EQ(t.m_block, prev.m_block - 1);
      }
    }
    for (int n : seen) EXPECT_EQ(n, 1);
  }
}

// The group of (batch, head) pair bh in tile_by_length's order, counted from 0: the pairs the
// others leave first, then sections of section_bh, then the last tail_bh.
int group_of(int bh, int bh_count, int section_bh, int tail_bh) {
  const int rest = bh_count - tail_bh, lead = rest % section_bh;
  if (bh >= rest) return 1 + rest / section_bh;
  if (bh < lead) return 0;
  return 1 + (bh - lead) / section_bh;
}

TEST(TileOrder, ByLengthVisitsEveryTileOnceLongestFirstPerGroup) {
  for (const Grid& g : kGrids) {
    const int bh = g.heads * g.batch;
    for (int section_bh : {1, 2, 3, bh}) {
      if (section_bh > bh) continue;
      for (int ctas : {1, 7, 132}) {
        const int tail_bh = LongestFirstScheduler::tail_fwd_pairs(bh, section_bh, g.m_blocks, ctas);
        ASSERT_GE(tail_bh, section_bh);
        ASSERT_LE(tail_bh, bh);
        ASSERT_LE(tail_bh, 2 * section_bh);
        std::vector<int> seen(g.tiles(), 0);
        int prev_group = -1;
        for (int idx = 0; idx < g.tiles(); ++idx) {
          const FwdTile t = LongestFirstScheduler::tile_by_length(idx, g.m_blocks, g.heads, g.batch, section_bh, tail_bh);
          ASSERT_NO_FATAL_FAILURE(expect_in_range(g, t));
          ++seen[g.index(t)];
          // Groups come in order, each wholly before the next; within one, q-blocks never increase.
          const int group = group_of(t.batch * g.heads + t.head, bh, section_bh, tail_bh);
          EXPECT_GE(group, prev_group) << "section_bh " << section_bh << " tail " << tail_bh << " idx " << idx;
          if (group == prev_group) {
            const FwdTile prev =
                LongestFirstScheduler::tile_by_length(idx - 1, g.m_blocks, g.heads, g.batch, section_bh, tail_bh);
            EXPECT_LE(t.m_block, prev.m_block) << "section_bh " << section_bh << " tail " << tail_bh << " idx " << idx;
          }
          prev_group = group;
        }
        for (int n : seen) EXPECT_EQ(n, 1) << "section_bh " << section_bh << " tail " << tail_bh;
      }
    }
  }
}

TEST(TileOrder, TailCoversTheGridWhereTheSectionsAllow) {
  // The grid's causal shapes at hdim 256 (128-row tiles, 24 MiB sections) on 132 CTAs.
  EXPECT_EQ(LongestFirstScheduler::tail_fwd_pairs(128, 24, 8, 132), 33);   // 1k: 2·132 / 8 pairs
  EXPECT_EQ(LongestFirstScheduler::tail_fwd_pairs(8, 1, 128, 132), 2);     // 16k: two sections at most
  EXPECT_EQ(LongestFirstScheduler::tail_fwd_pairs(128, 24, 22, 132), 24);  // one section covers it
  EXPECT_EQ(LongestFirstScheduler::tail_fwd_pairs(3, 24, 1, 132), 3);      // all the pairs
}

TEST(RotatedQOrder, EveryKvBlockVisitsEveryQBlockOnceAndTurnsFollowArrival) {
  using fa::cuda::sm90::RotatedQOrder;
  for (int n_q : {1, 2, 3, 4, 7, 8, 13, 16, 64}) {
    for (int n_kv : {1, 2, 3, 4, 8, 9, 16, 128}) {
      // step[j][qb]: the step at which kv block j reaches q block qb.
      std::vector<std::vector<int>> step(n_kv, std::vector<int>(n_q, -1));
      for (int j = 0; j < n_kv; ++j) {
        for (int s = 0; s < n_q; ++s) {
          const int qb = RotatedQOrder::qb_of_step(s, RotatedQOrder::first_qb(j, n_q, n_kv), n_q);
          ASSERT_GE(qb, 0);
          ASSERT_LT(qb, n_q);
          ASSERT_EQ(step[j][qb], -1) << "n_q " << n_q << " n_kv " << n_kv << " j " << j << " qb " << qb;
          step[j][qb] = s;
        }
      }
      for (int qb = 0; qb < n_q; ++qb) {
        std::vector<int> seen(n_kv, 0);
        for (int j = 0; j < n_kv; ++j) {
          const int t = RotatedQOrder::turn(qb, j, n_q, n_kv);
          ASSERT_GE(t, 0);
          ASSERT_LT(t, n_kv);
          ++seen[t];
          // The kv blocks before j: those reaching qb at an earlier step, or at the same one
          // from a higher block.
          int before = 0;
          for (int k = 0; k < n_kv; ++k)
            before += step[k][qb] < step[j][qb] || (step[k][qb] == step[j][qb] && k > j);
          EXPECT_EQ(t, before) << "n_q " << n_q << " n_kv " << n_kv << " qb " << qb << " j " << j;
        }
        for (int c : seen) EXPECT_EQ(c, 1) << "n_q " << n_q << " n_kv " << n_kv << " qb " << qb;
      }
    }
  }
}

TEST(TileOrder, PersistentRoundsHandOutEveryIndexOnce) {
  for (int64_t tiles : {1, 5, 131, 132, 133, 2048, 4096 + 7}) {
    for (int64_t ctas : {1, 7, 132}) {
      const int64_t g = tiles < ctas ? tiles : ctas;  // the launch's grid
      std::vector<int> seen(tiles, 0);
      for (int64_t c = 0; c < g; ++c) {
        for (int64_t r = 0;; ++r) {
          const int64_t idx = LongestFirstScheduler::persistent_index(r, g, c);
          if (idx >= tiles) break;
          ASSERT_GE(idx, 0);
          ++seen[idx];
        }
      }
      for (int n : seen) EXPECT_EQ(n, 1) << tiles << " tiles, " << g << " CTAs";
    }
  }
}

TEST(MaskIntervals, RowAndKeyIntervalsHoldExactlyTheVisiblePairs) {
  const int64_t lens[] = {1, 2, 7, 16, 33};
  const int64_t sides[] = {-1, 0, 1, 5, 40};
  for (int64_t sq : lens)
    for (int64_t sk : lens)
      for (int64_t left : sides)
        for (int64_t right : sides) {
          fa::Mask m;
          m.left = left, m.right = right;
          for (int64_t i = 0; i < sq; ++i)
            for (int64_t j = 0; j < sk; ++j) {
              const bool v = m.visible(i, j, sq, sk);
              const bool by_row = m.key_begin(i, sq, sk) <= j && j < m.key_end(i, sq, sk);
              const bool by_key = m.query_begin(j, sq, sk) <= i && i < m.query_end(j, sq, sk);
              ASSERT_EQ(by_row, v) << sq << "x" << sk << " (" << left << ", " << right << ") row " << i << " key " << j;
              ASSERT_EQ(by_key, v) << sq << "x" << sk << " (" << left << ", " << right << ") row " << i << " key " << j;
            }
          for (int64_t j = 0; j < sk; ++j) {  // clamped to [0, sq]
            EXPECT_GE(m.query_begin(j, sq, sk), 0);
            EXPECT_LE(m.query_end(j, sq, sk), sq);
          }
        }
}

}  // namespace
