// The AMX path of the bf16 varlen attention kernel: blocks of 16 query rows, scores and the weighted sum of values
// as AMX tile products (tdpbf16ps: a 16x16 fp32 block from 16x32 by 32x16 bf16 per instruction, where AVX512-BF16
// needs 32 instructions), the softmax in fp32 AVX-512 between them. The operands are the layouts the AVX512-BF16
// path already packs: keys as (d, d + 1) pairs per key and values as (row j, row j + 1) pairs per head dim are
// exactly AMX's pair-interleaved B operands. Compiled with -mamx-tile -mamx-bf16 (setup.py); used only where
// the CPU has AMX-BF16 and Linux grants the tile state (amx_ready).
#include <cpuid.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <utility>

#include "varlen_bf16.h"
#include "varlen_common.h"

#if defined(__AMX_TILE__) && defined(__AMX_BF16__)
namespace wde::bf16 {
namespace {

constexpr int TILE_ROWS = 16;  // query rows per block, and rows of every tile
constexpr int PAIR_KEYS = 32;  // keys per tile product of probabilities by values (16 pairs)
constexpr int ARCH_REQ_XCOMP_PERM = 0x1023, XFEATURE_XTILEDATA = 18;

struct alignas(64) TileConfig {  // palette 1, eight tiles of 16 rows x 64 bytes: tmm0-3 accumulators, tmm4 the shared
  uint8_t palette = 1, start_row = 0, reserved[14] = {};  // A operand, tmm5-7 B operands
  uint16_t colsb[16] = {64, 64, 64, 64, 64, 64, 64, 64};
  uint8_t rows[16] = {TILE_ROWS, TILE_ROWS, TILE_ROWS, TILE_ROWS, TILE_ROWS, TILE_ROWS, TILE_ROWS, TILE_ROWS};
};

// Up to four 16x16 products sharing the A operand in tmm4 (tile numbers must be literals: hence the cases): the
// accumulators are independent, so the tile unit overlaps them instead of waiting on one. b(t) is the t-th B operand.
template <typename B>
inline void accumulate_tiles(int count, int stride, B b) {
  _tile_loadd(5, b(0), stride);
  _tile_dpbf16ps(0, 4, 5);
  if (count > 1) { _tile_loadd(6, b(1), stride); _tile_dpbf16ps(1, 4, 6); }
  if (count > 2) { _tile_loadd(7, b(2), stride); _tile_dpbf16ps(2, 4, 7); }
  if (count > 3) { _tile_loadd(5, b(3), stride); _tile_dpbf16ps(3, 4, 5); }
}

inline void zero_tiles(int count) {
  _tile_zero(0);
  if (count > 1) _tile_zero(1);
  if (count > 2) _tile_zero(2);
  if (count > 3) _tile_zero(3);
}

inline void store_tiles(int count, float* out, int stride, int step) {  // accumulator t to out + t * step
  _tile_stored(0, out, stride);
  if (count > 1) _tile_stored(1, out + step, stride);
  if (count > 2) _tile_stored(2, out + 2 * step, stride);
  if (count > 3) _tile_stored(3, out + 3 * step, stride);
}

// The A operand rows of query block [i, i + rows): a full block is read in place (a tile load takes q's row stride);
// a partial one is copied into sc.qb ([16][D]), rows past `rows` repeating the last (computed, never stored), since
// reading past them could run off the tensor. Returns the rows and their stride in bytes.
std::pair<const uint16_t*, int> query_block(const Head& h, Scratch& sc, int D, int i, int rows) {
  if (rows == TILE_ROWS) return {h.q + i * h.qs, static_cast<int>(h.qs * sizeof(uint16_t))};
  for (int r = 0; r < TILE_ROWS; ++r)
    std::memcpy(sc.qb.data() + r * D, h.q + (i + std::min(r, rows - 1)) * h.qs, D * sizeof(uint16_t));
  return {sc.qb.data(), static_cast<int>(D * sizeof(uint16_t))};
}

// Scores of the block's 16 rows against keys [j0, jend) (a multiple of 16 keys) into sc.s ([16][width]), four
// tiles of 16 keys at a time.
void block_scores(Scratch& sc, std::pair<const uint16_t*, int> q, int width, int D, int j0, int jend) {
  for (int n = j0; n < jend; n += 64) {
    const int count = std::min(4, (jend - n) / 16);
    zero_tiles(count);
    for (int c = 0; c < D; c += 32) {
      _tile_loadd(4, q.first + c, q.second);
      const uint32_t* keys = sc.kt.data() + static_cast<size_t>(c / 2) * width + n;
      accumulate_tiles(count, width * sizeof(uint32_t), [&](int t) { return keys + 16 * t; });
    }
    store_tiles(count, sc.s.data() + (n - j0), width * sizeof(float), 16);
  }
}

// The block's softmax straight to bf16 probabilities over [0, n) (softmax_rows_bf16: exp2_bf16_ps, one pass after
// the max), zero on [n, padded) (whole chunks of PAIR_KEYS).
void block_probabilities(Scratch& sc, int width, int j0, int jend, int pend, const int* los, const int* his,
                         float scale) {
  for (int r = 0; r < TILE_ROWS; r += 8)  // eight rows at a time keep the softmax's state in registers
    softmax_rows_bf16<8>(sc.s.data() + r * width, sc.p.data() + r * width, width, j0, jend, los + r, his + r, scale,
                         sc.inv.data() + r);
  for (int r = 0; r < TILE_ROWS; ++r)
    std::fill(sc.p.data() + r * width + (jend - j0), sc.p.data() + r * width + (pend - j0), uint16_t{0});
}

// Output rows [i, i + rows) = probabilities x values over keys [j0, pend), each row scaled by its 1 / sum; four
// tiles of 16 head dims at a time.
void block_weighted_values(const Head& h, Scratch& sc, int width, int D, int i, int rows, int j0, int pend) {
  alignas(64) float acc[4][TILE_ROWS][16];
  for (int c0 = 0; c0 < D; c0 += 64) {
    const int count = std::min(4, (D - c0) / 16);
    zero_tiles(count);
    for (int n = j0; n < pend; n += PAIR_KEYS) {
      _tile_loadd(4, sc.p.data() + (n - j0), width * sizeof(uint16_t));
      const uint32_t* values = sc.vp.data() + static_cast<size_t>(n / 2) * D + c0;
      accumulate_tiles(count, D * sizeof(uint32_t), [&](int t) { return values + 16 * t; });
    }
    store_tiles(count, acc[0][0], sizeof acc[0][0], TILE_ROWS * 16);
    for (int t = 0; t < count; ++t)
      for (int r = 0; r < rows; ++r)
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(h.out + (i + r) * h.os + c0 + 16 * t),
                            bits(_mm512_cvtneps_pbh(_mm512_mul_ps(_mm512_load_ps(acc[t][r]), _mm512_set1_ps(sc.inv[r])))));
  }
}

}  // namespace

bool amx_ready() {
  static const bool ready = [] {
    unsigned a, b, c, d;
    if (!__get_cpuid_count(7, 0, &a, &b, &c, &d) || !((d >> 22) & 1u) || !((d >> 24) & 1u)) return false;
    return syscall(SYS_arch_prctl, ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA) == 0;  // Linux hands out tile state
  }();
  return ready;
}

void attend_rows_amx(const Head& h, int L, int D, int row0, int row1, bool causal, int window, float scale,
                     Scratch& sc) {
  const int width = ((L + 15) & ~15) + KEYS;  // as the AVX512-BF16 path: room for a padded chunk of PAIR_KEYS
  int lo, last;
  key_range(row1 - 1, L, causal, window, &lo, &last);
  pack(h, sc, D, last, width);
  sc.s.resize(static_cast<size_t>(TILE_ROWS) * width);
  sc.p.resize(static_cast<size_t>(TILE_ROWS) * width);
  sc.qb.resize(static_cast<size_t>(TILE_ROWS) * D);
  sc.inv.resize(TILE_ROWS);
  const TileConfig config;
  _tile_loadconfig(&config);
  for (int i = row0; i < row1; i += TILE_ROWS) {
    const int rows = std::min(TILE_ROWS, row1 - i);
    int j0, j1, hi;
    key_range(i, L, causal, window, &j0, &hi);
    key_range(i + rows - 1, L, causal, window, &lo, &j1);
    j0 &= ~15;
    const int jend = j0 + ((j1 - j0 + 15) & ~15), pend = j0 + ((j1 - j0 + PAIR_KEYS - 1) & ~(PAIR_KEYS - 1));
    block_scores(sc, query_block(h, sc, D, i, rows), width, D, j0, jend);
    int los[TILE_ROWS], his[TILE_ROWS];
    for (int r = 0; r < TILE_ROWS; ++r) key_range(i + std::min(r, rows - 1), L, causal, window, &los[r], &his[r]);
    block_probabilities(sc, width, j0, jend, pend, los, his, scale);
    block_weighted_values(h, sc, width, D, i, rows, j0, pend);
  }
  _tile_release();
}

}  // namespace wde::bf16
#else  // built without AMX: the AVX512-BF16 path serves every CPU
namespace wde::bf16 {
bool amx_ready() { return false; }
void attend_rows_amx(const Head&, int, int, int, int, bool, int, float, Scratch&) {}
}  // namespace wde::bf16
#endif
