# make bench-quant's changes to llama.cpp's tests/test-backend-ops.cpp (llama-cpp-python 0.3.36's
# copy), applied by sed -f into perf/.ggml/test-backend-ops-quant.cpp; the Makefile checks both.
# 1. Its perf cases gain llama3-8b's attention products, m outputs × k 4096 inputs for q and o
#    (4096) and k and v (1024), at n = 1 and n = 8 (its list has 4096 × 14336 for every type, and
#    4096 × 4096 only for Q4_K).
/^static std::vector<std::unique_ptr<test_case>> make_test_cases_perf() {$/{
n
a\
    // mha make bench-quant: llama3-8b attention projections, q and o 4096 x 4096, k and v 1024 x 4096\
    for (ggml_type t : {GGML_TYPE_F32, GGML_TYPE_BF16, GGML_TYPE_Q8_0, GGML_TYPE_Q4_0, GGML_TYPE_Q4_1,\
                        GGML_TYPE_Q4_K, GGML_TYPE_Q6_K})\
        for (int n : {1, 8})\
            for (int64_t m : {4096, 1024})\
                test_cases.emplace_back(new test_mul_mat(t, GGML_TYPE_F32, m, n, 4096, {1, 1}, {1, 1}));
}
# 2. Its backend's threads from GGML_N_THREADS when set (it gives the CPU backend half the CPUs).
s|set_n_threads_fn(backend.get(), std::max<int>(1, N_THREADS/2));|set_n_threads_fn(backend.get(),\
    getenv("GGML_N_THREADS") ? atoi(getenv("GGML_N_THREADS")) : std::max<int>(1, N_THREADS/2));|
