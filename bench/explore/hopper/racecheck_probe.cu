// Does compute-sanitizer racecheck see a CTA barrier that different warps reach at different
// instructions? Triton's warp specialization hands each partition its work that way: the default
// warps write a state word and the captured values to shared memory, then `barrier.sync 1` (the
// non-.aligned form, every thread of the CTA); the worker warps wait at their own `barrier.sync 1`
// and then read them. racecheck reported hazards between exactly those writes and reads in
// kernels/attn_fwd_hopper.py (docs/design.md, "Sanitizers"). This probe reproduces the pattern in
// plain CUDA with nothing else in the kernel:
//   same_pc:   writes; one barrier.sync 1 that every warp executes at the same instruction; reads.
//   split_pc:  the default warps write and reach barrier.sync 1 at one instruction, the workers reach
//              it at another and read: the ordering is the same, the code is Triton's.
//   handoff:   Triton's whole hand-off, 12 warps: the default warps (0-3) write a state byte per worker
//              warp and a captured value, barrier A, barrier B, "work", barrier C, write the exit
//              state, barrier D. Active workers (4-8): A, read state and capture, B, work, C, D, read
//              the exit state. Idle workers (9-11): A, read state, B, C, D, read the exit state. Every
//              warp reaches the same four barriers, each at its own instructions.
//   handoff_maxnreg: handoff with Triton's register hand-over around the barriers (sm_90a's
//              setmaxnreg, per warpgroup: the default warpgroup to 256 then 240, the first worker
//              warpgroup 120 then 240 while it works, the second 24), launched with 168 registers
//              per thread (ptxas gives a kernel with setmaxnreg its launch bound's 65536 / 384,
//              rounded down to 8), as Triton launches attn_fwd_hopper (maxnreg 168).
//   handoff_bar0: handoff_maxnreg, and before its writes the default warps sync among themselves with
//              `bar.sync 0, 128` (barrier 0, 128 threads), as Triton's code does after its mbarrier
//              inits.
//   handoff_store64: handoff_maxnreg, but every default thread stores the 8 state bytes (one 64-bit
//              store, STS.64 in Triton's SASS) and the capture, as Triton's code does.
//   handoff_triton: both.
// Every read returns the written value (checked); a report on a variant whose every read is ordered
// after its write by a barrier says racecheck misses the barrier, not that the program races.
//   nvcc -arch=sm_90a -o probe racecheck_probe.cu
//   compute-sanitizer --tool racecheck ./probe same_pc|split_pc|handoff|handoff_maxnreg|handoff_bar0|handoff_store64|handoff_triton
#include <cstdio>
#include <cstring>

__device__ __forceinline__ void cta_barrier_1() { asm volatile("barrier.sync 1;" ::: "memory"); }

__global__ void same_pc(int *out) {
  __shared__ int state[256];
  const int warp = threadIdx.x / 32;
  if (warp < 4) state[threadIdx.x + 128] = 1000 + threadIdx.x;
  cta_barrier_1();
  if (warp >= 4) out[threadIdx.x - 128] = state[threadIdx.x];
}

__global__ void split_pc(int *out) {
  __shared__ int state[256];
  const int warp = threadIdx.x / 32;
  if (warp < 4) {
    state[threadIdx.x + 128] = 1000 + threadIdx.x;
    cta_barrier_1();
  } else {
    cta_barrier_1();
    out[threadIdx.x - 128] = state[threadIdx.x];
  }
}

enum { HANDOFF_STATE_WORK = 1, HANDOFF_STATE_IDLE = 7, HANDOFF_STATE_EXIT = 4 };

// out[warp - 4] = 1000 * first state + 100 * exit state + (capture == 42) for each worker warp.
__global__ void handoff(int *out) {
  __shared__ unsigned char state[16];
  __shared__ int capture;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (warp < 4) {
    if (threadIdx.x >= 4 && threadIdx.x < 12) state[threadIdx.x] = threadIdx.x <= 8 ? HANDOFF_STATE_WORK : HANDOFF_STATE_IDLE;
    if (threadIdx.x == 0) capture = 42;
    cta_barrier_1();  // A
    cta_barrier_1();  // B
    cta_barrier_1();  // C: the workers are done
    if (threadIdx.x >= 4 && threadIdx.x < 12) state[threadIdx.x] = HANDOFF_STATE_EXIT;
    cta_barrier_1();  // D
    return;
  }
  int first = 0, got = 0;
  for (;;) {
    cta_barrier_1();  // A, then D
    const int s = state[warp];
    if (s == HANDOFF_STATE_EXIT) break;
    first = s;
    if (s == HANDOFF_STATE_WORK) {
      got = capture == 42;
      cta_barrier_1();  // B
      cta_barrier_1();  // C
    } else {
      cta_barrier_1();  // B
      cta_barrier_1();  // C
    }
  }
  if (lane == 0) out[warp - 4] = 1000 * first + 100 * HANDOFF_STATE_EXIT + got;
}

#define SETMAXNREG(inc_or_dec, n) asm volatile("setmaxnreg." #inc_or_dec ".sync.aligned.u32 " #n ";" ::: "memory")

template <bool BAR0, bool STORE64>
__global__ void __launch_bounds__(384, 1) handoff_maxnreg(int *out) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  __shared__ __align__(8) unsigned char state[16];
  __shared__ int capture;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (warp < 4) {
    SETMAXNREG(inc, 256);
    if (BAR0) asm volatile("bar.sync 0, 128;" ::: "memory");
    if (STORE64) {
      unsigned long long word = 0;
      for (int w = 4; w < 12; w++) word |= (unsigned long long)(w < 8 ? HANDOFF_STATE_WORK : HANDOFF_STATE_IDLE) << (8 * (w - 4));
      *(volatile unsigned long long *)&state[8] = word;  // warps 4..11 at 8..15: one 8-byte store, every thread
      *(volatile int *)&capture = 42;
    } else {
      if (threadIdx.x >= 4 && threadIdx.x < 12) state[threadIdx.x + 4] = threadIdx.x < 8 ? HANDOFF_STATE_WORK : HANDOFF_STATE_IDLE;
      if (threadIdx.x == 0) capture = 42;
    }
    cta_barrier_1();  // A
    SETMAXNREG(dec, 240);
    cta_barrier_1();  // B
    cta_barrier_1();  // C
    if (threadIdx.x >= 4 && threadIdx.x < 12) state[threadIdx.x + 4] = HANDOFF_STATE_EXIT;
    cta_barrier_1();  // D
    return;
  }
  const bool first_group = warp < 8;
  if (first_group) SETMAXNREG(dec, 120); else SETMAXNREG(dec, 24);
  int first = 0, got = 0;
  for (;;) {
    cta_barrier_1();  // A, then D
    const int s = state[warp + 4];  // warp w's byte at w + 4 (8-byte aligned from warp 4)
    if (s == HANDOFF_STATE_EXIT) break;
    first = s;
    if (first_group) {
      SETMAXNREG(inc, 240);
      got = capture == 42;
      cta_barrier_1();  // B
      cta_barrier_1();  // C
      SETMAXNREG(dec, 120);
    } else {
      cta_barrier_1();  // B
      cta_barrier_1();  // C
    }
  }
  if (lane == 0) out[warp - 4] = 1000 * first + 100 * HANDOFF_STATE_EXIT + got;
#endif
}

int main(int argc, char **argv) {
  const char *mode = argc > 1 ? argv[1] : "same_pc";
  int *out, host[128];
  cudaMalloc(&out, sizeof host);
  int wrong = 0;
  if (strncmp(mode, "handoff", 7) == 0) {
    const bool bar0 = strcmp(mode, "handoff_bar0") == 0, store64 = strcmp(mode, "handoff_store64") == 0;
    const bool both = strcmp(mode, "handoff_triton") == 0;
    const bool maxnreg = bar0 || store64 || both || strcmp(mode, "handoff_maxnreg") == 0;
    const int last_worker = maxnreg ? 7 : 8;  // the last warp that works
    if (both) handoff_maxnreg<true, true><<<64, 384>>>(out);
    else if (bar0) handoff_maxnreg<true, false><<<64, 384>>>(out);
    else if (store64) handoff_maxnreg<false, true><<<64, 384>>>(out);
    else if (maxnreg) handoff_maxnreg<false, false><<<64, 384>>>(out);
    else handoff<<<64, 384>>>(out);
    cudaMemcpy(host, out, 8 * sizeof(int), cudaMemcpyDeviceToHost);
    for (int w = 4; w < 12; w++) {
      const int first = w <= last_worker ? HANDOFF_STATE_WORK : HANDOFF_STATE_IDLE;
      wrong += host[w - 4] != 1000 * first + 100 * HANDOFF_STATE_EXIT + (w <= last_worker);
    }
  } else {
    if (strcmp(mode, "split_pc") == 0) split_pc<<<64, 256>>>(out); else same_pc<<<64, 256>>>(out);
    cudaMemcpy(host, out, sizeof host, cudaMemcpyDeviceToHost);
    for (int i = 0; i < 128; i++) wrong += host[i] != 1000 + i;
  }
  printf("%s: %d reads wrong (%s)\n", mode, wrong, cudaGetErrorString(cudaGetLastError()));
  cudaFree(out);
  return wrong != 0;
}
