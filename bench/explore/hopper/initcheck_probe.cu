// Does compute-sanitizer initcheck see memory written by the Hopper bulk copies (TMA)? Its reports on
// the GPU suites (docs/design.md, "Sanitizers") are reads of outputs that the Gluon forward writes with
// a TMA store: the forward's output copied to the host, and the backward's pre-pass reading O. This
// probe writes a fresh cudaMalloc buffer three ways, then reads it with a kernel (ld.global) and with
// cudaMemcpy to the host, and checks every value:
//   plain:  st.global by every thread.
//   bulk:   the tile staged in shared memory, then one thread's cp.async.bulk (1-D, shared to global).
//   tensor: the same tile stored by cp.async.bulk.tensor.2d through a CUtensorMap (what Triton's and
//           Gluon's TMA stores compile to).
// A report on bulk or tensor, whose values all check out, says initcheck misses those writes.
//   nvcc -arch=sm_90a -o probe initcheck_probe.cu -lcuda
//   compute-sanitizer --tool initcheck ./probe plain|bulk|tensor
#include <cuda.h>
#include <cuda_runtime.h>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <vector>

constexpr int kRows = 64, kCols = 64, kElements = kRows * kCols;

__device__ void fill_tile(uint32_t *tile) {
  for (int i = threadIdx.x; i < kElements; i += blockDim.x) tile[i] = 0x1000u + (uint32_t)i;
  asm volatile("fence.proxy.async.shared::cta;" ::: "memory");  // generic-proxy writes, then the async proxy
  __syncthreads();
}

__global__ void store_plain(uint32_t *dst) {
  for (int i = threadIdx.x; i < kElements; i += blockDim.x) dst[i] = 0x1000u + (uint32_t)i;
}

__global__ void store_bulk(uint32_t *dst) {
  __shared__ alignas(128) uint32_t tile[kElements];
  fill_tile(tile);
  if (threadIdx.x == 0) {
    uint32_t source = (uint32_t)__cvta_generic_to_shared(tile);
    asm volatile("cp.async.bulk.global.shared::cta.bulk_group [%0], [%1], %2;" ::"l"(dst), "r"(source),
                 "r"(kElements * 4) : "memory");
    asm volatile("cp.async.bulk.commit_group;" ::: "memory");
    asm volatile("cp.async.bulk.wait_group 0;" ::: "memory");
  }
}

__global__ void store_tensor(const __grid_constant__ CUtensorMap map) {
  __shared__ alignas(128) uint32_t tile[kElements];
  fill_tile(tile);
  if (threadIdx.x == 0) {
    uint32_t source = (uint32_t)__cvta_generic_to_shared(tile);
    asm volatile("cp.async.bulk.tensor.2d.global.shared::cta.bulk_group [%0, {%1, %2}], [%3];" ::"l"(&map),
                 "r"(0), "r"(0), "r"(source) : "memory");
    asm volatile("cp.async.bulk.commit_group;" ::: "memory");
    asm volatile("cp.async.bulk.wait_group 0;" ::: "memory");
  }
}

__global__ void count_wrong(const uint32_t *src, int *wrong) {
  for (int i = threadIdx.x; i < kElements; i += blockDim.x)
    if (src[i] != 0x1000u + (uint32_t)i) atomicAdd(wrong, 1);
}

int main(int argc, char **argv) {
  const char *variant = argc > 1 ? argv[1] : "";
  uint32_t *buffer = nullptr;
  int *wrong = nullptr;
  cudaMalloc(&buffer, kElements * 4);
  cudaMalloc(&wrong, 4);
  cudaMemset(wrong, 0, 4);
  if (!strcmp(variant, "plain")) {
    store_plain<<<1, 128>>>(buffer);
  } else if (!strcmp(variant, "bulk")) {
    store_bulk<<<1, 128>>>(buffer);
  } else if (!strcmp(variant, "tensor")) {
    CUtensorMap map;
    cuuint64_t dims[2] = {kCols, kRows}, strides[1] = {kCols * 4};
    cuuint32_t box[2] = {kCols, kRows}, element_strides[2] = {1, 1};
    CUresult encoded = cuTensorMapEncodeTiled(&map, CU_TENSOR_MAP_DATA_TYPE_UINT32, 2, buffer, dims, strides, box,
                                              element_strides, CU_TENSOR_MAP_INTERLEAVE_NONE,
                                              CU_TENSOR_MAP_SWIZZLE_NONE, CU_TENSOR_MAP_L2_PROMOTION_NONE,
                                              CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
    if (encoded != CUDA_SUCCESS) {
      printf("cuTensorMapEncodeTiled: %d\n", (int)encoded);
      return 1;
    }
    store_tensor<<<1, 128>>>(map);
  } else {
    printf("usage: %s plain|bulk|tensor\n", argv[0]);
    return 2;
  }
  count_wrong<<<1, 128>>>(buffer, wrong);
  std::vector<uint32_t> host(kElements);
  int device_wrong = -1, host_wrong = 0;
  cudaMemcpy(&device_wrong, wrong, 4, cudaMemcpyDeviceToHost);
  cudaMemcpy(host.data(), buffer, kElements * 4, cudaMemcpyDeviceToHost);
  for (int i = 0; i < kElements; i++) host_wrong += host[i] != 0x1000u + (uint32_t)i;
  cudaError_t error = cudaDeviceSynchronize();
  printf("%s: %s, %d wrong on the device, %d on the host (of %d)\n", variant, cudaGetErrorString(error),
         device_wrong, host_wrong, kElements);
  return error == cudaSuccess && device_wrong == 0 && host_wrong == 0 ? 0 : 1;
}
