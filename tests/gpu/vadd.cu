// A vector add and a small matrix multiply on the GPU, checked against the CPU.
// Built with `nvcc -cudart static`, so the container needs only the driver (libcuda).
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <vector>

#define CHECK(call)                                                                   \
    do {                                                                              \
        cudaError_t err_ = (call);                                                    \
        if (err_ != cudaSuccess) {                                                    \
            std::printf("cuda error %s at %s:%d\n", cudaGetErrorString(err_), __FILE__, \
                        __LINE__);                                                    \
            return 1;                                                                 \
        }                                                                             \
    } while (0)

__global__ void vadd(const float *a, const float *b, float *c, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) c[i] = a[i] + b[i];
}

__global__ void matmul(const float *a, const float *b, float *c, int n) {
    int row = blockIdx.y * blockDim.y + threadIdx.y;
    int col = blockIdx.x * blockDim.x + threadIdx.x;
    if (row < n && col < n) {
        float acc = 0.0f;
        for (int k = 0; k < n; ++k) acc += a[row * n + k] * b[k * n + col];
        c[row * n + col] = acc;
    }
}

int main() {
    int driver = 0, runtime = 0, count = 0;
    CHECK(cudaDriverGetVersion(&driver));
    CHECK(cudaRuntimeGetVersion(&runtime));
    CHECK(cudaGetDeviceCount(&count));
    cudaDeviceProp prop;
    CHECK(cudaGetDeviceProperties(&prop, 0));
    std::printf("devices=%d name=%s driver_api=%d runtime=%d\n", count, prop.name, driver, runtime);

    const int n = 1 << 24;
    std::vector<float> a(n), b(n), c(n);
    for (int i = 0; i < n; ++i) { a[i] = std::sin(i) ; b[i] = std::cos(i); }
    float *da, *db, *dc;
    CHECK(cudaMalloc(&da, n * sizeof(float)));
    CHECK(cudaMalloc(&db, n * sizeof(float)));
    CHECK(cudaMalloc(&dc, n * sizeof(float)));
    CHECK(cudaMemcpy(da, a.data(), n * sizeof(float), cudaMemcpyHostToDevice));
    CHECK(cudaMemcpy(db, b.data(), n * sizeof(float), cudaMemcpyHostToDevice));
    vadd<<<(n + 255) / 256, 256>>>(da, db, dc, n);
    CHECK(cudaGetLastError());
    CHECK(cudaMemcpy(c.data(), dc, n * sizeof(float), cudaMemcpyDeviceToHost));
    double max_err = 0;
    for (int i = 0; i < n; ++i) max_err = std::fmax(max_err, std::fabs(c[i] - (a[i] + b[i])));

    const int m = 256;
    std::vector<float> ma(m * m), mb(m * m), mc(m * m), ref(m * m, 0.0f);
    for (int i = 0; i < m * m; ++i) { ma[i] = (i % 7) * 0.25f; mb[i] = (i % 5) * 0.5f; }
    for (int r = 0; r < m; ++r)
        for (int k = 0; k < m; ++k)
            for (int col = 0; col < m; ++col) ref[r * m + col] += ma[r * m + k] * mb[k * m + col];
    float *ga, *gb, *gc;
    CHECK(cudaMalloc(&ga, m * m * sizeof(float)));
    CHECK(cudaMalloc(&gb, m * m * sizeof(float)));
    CHECK(cudaMalloc(&gc, m * m * sizeof(float)));
    CHECK(cudaMemcpy(ga, ma.data(), m * m * sizeof(float), cudaMemcpyHostToDevice));
    CHECK(cudaMemcpy(gb, mb.data(), m * m * sizeof(float), cudaMemcpyHostToDevice));
    dim3 block(16, 16), grid((m + 15) / 16, (m + 15) / 16);
    matmul<<<grid, block>>>(ga, gb, gc, m);
    CHECK(cudaGetLastError());
    CHECK(cudaMemcpy(mc.data(), gc, m * m * sizeof(float), cudaMemcpyDeviceToHost));
    double mm_err = 0;
    for (int i = 0; i < m * m; ++i) mm_err = std::fmax(mm_err, std::fabs(mc[i] - ref[i]));

    bool ok = max_err == 0.0 && mm_err < 1e-3;
    std::printf("vadd n=%d max_err=%g matmul n=%d max_err=%g result=%s\n", n, max_err, m, mm_err,
                ok ? "OK" : "WRONG");
    return ok ? 0 : 2;
}
