// CUDA glue kernels of the transformer (kernels/cuda/elementwise.h): residual add, bias and its
// gradient, column slices, deterministic fill, scale; and the deterministic fp32 column reduction
// that bias and norm parameter gradients share.
#include "kernels/cuda/elementwise.h"

#include <algorithm>

#include "kernels/cuda/device_utils.cuh"

namespace parallax::kernels::cuda {

namespace {

using detail::grid_for;
using detail::grid_threads;
using detail::kPack;
using detail::load;
using detail::store;
using detail::thread_index;

// Elementwise kernels take packs of V elements (V = kPack<T> when detail::packable, else 1).
template <class T, int V>
__global__ void add_kernel(T* out, const T* a, const T* b, long n) {
  for (long i = thread_index() * V; i < n; i += grid_threads() * V) {
    float av[V], bv[V];
    load<V>(av, a + i);
    load<V>(bv, b + i);
#pragma unroll
    for (int k = 0; k < V; ++k) av[k] += bv[k];
    store<V>(out + i, av);
  }
}

template <class T, int V>
__global__ void add_bias_kernel(T* __restrict__ x, const T* __restrict__ bias, long n, int cols) {
  for (long i = thread_index() * V; i < n; i += grid_threads() * V) {
    float xv[V], bv[V];
    load<V>(xv, x + i);
    load<V>(bv, bias + i % cols);
#pragma unroll
    for (int k = 0; k < V; ++k) xv[k] += bv[k];
    store<V>(x + i, xv);
  }
}

// Row r of dst (dst_stride apart) = the first `width` elements of row r of src (src_stride apart).
template <class T, int V>
__global__ void copy_columns_kernel(T* __restrict__ dst, int dst_stride, const T* __restrict__ src, int src_stride,
                                    int rows, int width) {
  const long packs_per_row = width / V, packs = packs_per_row * rows;
  for (long p = thread_index(); p < packs; p += grid_threads()) {
    const long r = p / packs_per_row, k = (p % packs_per_row) * V;
    *reinterpret_cast<detail::Pack<T, V>*>(dst + r * dst_stride + k) =
        *reinterpret_cast<const detail::Pack<T, V>*>(src + r * src_stride + k);
  }
}

// Column sums over a chunk of rows. Block (32, 8) owns 32 columns; threadIdx.y strides the rows of
// chunk blockIdx.y and the 8 partial sums combine in a fixed order, so the result does not depend
// on timing. Writes (or, with `accumulate`, adds) row blockIdx.y of dst.
constexpr int kColumns = 32, kRowLanes = 8, kColumnThreads = kColumns * kRowLanes;
template <class T>
__global__ void __launch_bounds__(kColumnThreads)
    column_sums_kernel(float* __restrict__ dst, bool accumulate, const T* __restrict__ x, int rows, int cols,
                       int rows_per_chunk) {
  __shared__ float partial[kRowLanes][kColumns];
  const int j = blockIdx.x * kColumns + threadIdx.x;
  const long begin = static_cast<long>(blockIdx.y) * rows_per_chunk;
  const long end = begin + rows_per_chunk < rows ? begin + rows_per_chunk : rows;
  float sum = 0.0f;
  if (j < cols)
    for (long r = begin + threadIdx.y; r < end; r += kRowLanes) sum += detail::to_f32(x[r * cols + j]);
  partial[threadIdx.y][threadIdx.x] = sum;
  __syncthreads();
  if (threadIdx.y != 0 || j >= cols) return;
  for (int y = 1; y < kRowLanes; ++y) sum += partial[y][threadIdx.x];
  float& out = dst[static_cast<long>(blockIdx.y) * cols + j];
  out = accumulate ? out + sum : sum;
}

constexpr uint64_t kGolden = 0x9E3779B97F4A7C15ull;

// splitmix64's output function (Steele, Lea and Flood 2014) applied after its increment.
__host__ __device__ uint64_t splitmix64(uint64_t z) {
  z += kGolden;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// Element i is the i-th output of a splitmix64 stream whose state starts at splitmix64(seed), so
// nearby seeds give unrelated streams. The top 24 bits map exactly onto k 2^-23 - 1 in [-1, 1).
template <class T>
__global__ void fill_uniform_kernel(T* x, long n, uint64_t key, float scale) {
  for (long i = thread_index(); i < n; i += grid_threads()) {
    const uint64_t h = splitmix64(key + static_cast<uint64_t>(i) * kGolden);
    const float u = static_cast<float>(h >> 40) * 0x1p-23f - 1.0f;
    x[i] = detail::from_f32<T>(scale * u);
  }
}

template <int V>
__global__ void scale_kernel(float* x, long n, float s) {
  for (long i = thread_index() * V; i < n; i += grid_threads() * V) {
    float xv[V];
    load<V>(xv, x + i);
#pragma unroll
    for (int k = 0; k < V; ++k) xv[k] *= s;
    store<V>(x + i, xv);
  }
}

template <class T>
void copy_columns(T* dst, int dst_stride, const T* src, int src_stride, int rows, int width) {
  if (rows <= 0 || width <= 0) return;
  if (detail::packable<T>({dst, src}, {width, dst_stride, src_stride})) {
    constexpr int V = kPack<T>;
    copy_columns_kernel<T, V><<<grid_for(static_cast<long>(rows) * width / V), detail::kBlock, 0, stream()>>>(
        dst, dst_stride, src, src_stride, rows, width);
  } else {
    copy_columns_kernel<T, 1><<<grid_for(static_cast<long>(rows) * width), detail::kBlock, 0, stream()>>>(
        dst, dst_stride, src, src_stride, rows, width);
  }
  check_launch("copy_columns");
}

}  // namespace

namespace detail {

void add_column_partials(float* out, const float* partial, int chunks, int cols) {
  if (chunks <= 0 || cols <= 0) return;
  const dim3 grid((cols + kColumns - 1) / kColumns, 1), block(kColumns, kRowLanes);
  column_sums_kernel<float><<<grid, block, 0, stream()>>>(out, true, partial, chunks, cols, chunks);
  check_launch("add_column_partials");
}

}  // namespace detail

template <class T>
void add(T* out, const T* a, const T* b, long n) {
  if (n <= 0) return;
  if (detail::packable<T>({out, a, b}, {n}))
    add_kernel<T, kPack<T>><<<grid_for(n / kPack<T>), detail::kBlock, 0, stream()>>>(out, a, b, n);
  else
    add_kernel<T, 1><<<grid_for(n), detail::kBlock, 0, stream()>>>(out, a, b, n);
  check_launch("add");
}

template <class T>
void add_bias(T* x, const T* bias, int rows, int cols) {
  const long n = static_cast<long>(rows) * cols;
  if (n <= 0) return;
  if (detail::packable<T>({x, bias}, {cols}))
    add_bias_kernel<T, kPack<T>><<<grid_for(n / kPack<T>), detail::kBlock, 0, stream()>>>(x, bias, n, cols);
  else
    add_bias_kernel<T, 1><<<grid_for(n), detail::kBlock, 0, stream()>>>(x, bias, n, cols);
  check_launch("add_bias");
}

// Rows are split into chunks only as far as needed to fill the device (at least 64 rows a chunk,
// 8 per thread); with one chunk the kernel adds straight into dbias, otherwise the chunk partials
// go through a stream-ordered scratch and add_column_partials.
template <class T>
void bias_backward(float* dbias, const T* dout, int rows, int cols) {
  if (rows <= 0 || cols <= 0) return;
  const int column_blocks = (cols + kColumns - 1) / kColumns;
  const int wave = detail::sm_count() * (2048 / kColumnThreads);
  const int chunks = std::clamp(wave / column_blocks, 1, (rows + 63) / 64);
  const int rows_per_chunk = (rows + chunks - 1) / chunks;
  const dim3 grid(column_blocks, chunks), block(kColumns, kRowLanes);
  if (chunks == 1) {
    column_sums_kernel<T><<<grid, block, 0, stream()>>>(dbias, true, dout, rows, cols, rows_per_chunk);
    check_launch("bias_backward");
    return;
  }
  detail::Scratch<float> partial(static_cast<size_t>(chunks) * cols);
  column_sums_kernel<T><<<grid, block, 0, stream()>>>(partial.get(), false, dout, rows, cols, rows_per_chunk);
  check_launch("bias_backward");
  detail::add_column_partials(dbias, partial.get(), chunks, cols);
}

template <class T>
void get_columns(T* dst, const T* src, int rows, int stride, int col, int width) {
  copy_columns(dst, width, src + col, stride, rows, width);
}

template <class T>
void set_columns(T* dst, const T* src, int rows, int stride, int col, int width) {
  copy_columns(dst + col, stride, src, width, rows, width);
}

template <class T>
void fill_uniform(T* x, long n, uint64_t seed, float scale) {
  if (n <= 0) return;
  fill_uniform_kernel<T><<<grid_for(n), detail::kBlock, 0, stream()>>>(x, n, splitmix64(seed), scale);
  check_launch("fill_uniform");
}

void scale(float* x, long n, float s) {
  if (n <= 0) return;
  if (detail::packable<float>({x}, {n}))
    scale_kernel<kPack<float>><<<grid_for(n / kPack<float>), detail::kBlock, 0, stream()>>>(x, n, s);
  else
    scale_kernel<1><<<grid_for(n), detail::kBlock, 0, stream()>>>(x, n, s);
  check_launch("scale");
}

#define PARALLAX_INSTANTIATE(T)                                   \
  template void add<T>(T*, const T*, const T*, long);             \
  template void add_bias<T>(T*, const T*, int, int);              \
  template void bias_backward<T>(float*, const T*, int, int);     \
  template void get_columns<T>(T*, const T*, int, int, int, int); \
  template void set_columns<T>(T*, const T*, int, int, int, int); \
  template void fill_uniform<T>(T*, long, uint64_t, float);
PARALLAX_INSTANTIATE(float)
PARALLAX_INSTANTIATE(bf16)
PARALLAX_INSTANTIATE(fp16)
#undef PARALLAX_INSTANTIATE

}  // namespace parallax::kernels::cuda
