// Eight host threads, each with its own stream, each launching a kernel N
// times at the same moment. A debugger must see every one of the 8*N launches.
//
// usage: threads [N]   (default 100)
// Prints `launches bump=8N` when every thread's buffer holds N*(t+1).
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <thread>
#include <vector>

#include "check.h"

namespace worker {
template <typename T>
__global__ void bump(T* p, int n, T delta)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n)
        p[i] += delta;
}
}  // namespace worker

constexpr int kThreads = 8;
constexpr int kElems = 1024;

// A start line, so that the threads launch at once rather than one by one.
class StartGate {
public:
    void wait_for(int count)
    {
        std::unique_lock<std::mutex> lock(m_);
        if (++arrived_ == count)
            cv_.notify_all();
        else
            cv_.wait(lock, [&] { return arrived_ >= count; });
    }

private:
    std::mutex m_;
    std::condition_variable cv_;
    int arrived_ = 0;
};

static void work(int t, int launches, StartGate* gate, int* failures)
{
    CHECK_RT(cudaSetDevice(0));
    cudaStream_t stream;
    CHECK_RT(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    int* d;
    CHECK_RT(cudaMalloc(&d, kElems * sizeof(int)));
    CHECK_RT(cudaMemsetAsync(d, 0, kElems * sizeof(int), stream));
    CHECK_RT(cudaStreamSynchronize(stream));
    gate->wait_for(kThreads);
    for (int k = 0; k < launches; k++) {
        worker::bump<int><<<kElems / 256, 256, 0, stream>>>(d, kElems, t + 1);
        CHECK_LAUNCH();
    }
    CHECK_RT(cudaStreamSynchronize(stream));
    std::vector<int> back(kElems);
    CHECK_RT(cudaMemcpy(back.data(), d, kElems * sizeof(int), cudaMemcpyDeviceToHost));
    for (int i = 0; i < kElems; i++) {
        if (back[i] != launches * (t + 1)) {
            std::fprintf(stderr, "thread %d: element %d = %d, want %d\n", t, i, back[i],
                         launches * (t + 1));
            failures[t] = 1;
            break;
        }
    }
    CHECK_RT(cudaFree(d));
    CHECK_RT(cudaStreamDestroy(stream));
}

int main(int argc, char** argv)
{
    int launches = argc > 1 ? std::atoi(argv[1]) : 100;
    FAIL_IF(launches <= 0, "N must be positive");
    CHECK_RT(cudaFree(0));  // create the context before the threads race for it
    StartGate gate;
    int failures[kThreads] = {};
    std::vector<std::thread> threads;
    for (int t = 0; t < kThreads; t++)
        threads.emplace_back(work, t, launches, &gate, failures);
    for (auto& th : threads)
        th.join();
    for (int t = 0; t < kThreads; t++)
        FAIL_IF(failures[t], "thread %d computed a wrong result", t);
    std::printf("launches bump=%d\n", kThreads * launches);
    return 0;
}
