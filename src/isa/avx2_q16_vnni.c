/* avx2_q16_vnni.c — the avx2 table's integer products with AVX-VNNI's int16 pair sums into int32
 * (avx2_q16.c's code, built again): where the CPU has it, one instruction for a multiply, its
 * pairs and the sum. */
#define Q16_VNNI 1
#define Q16_TARGET AVX2 ",avxvnni"
#define Q16_OPS mha_qdot16_avx2_vnni
#define Q16_NAME "avx2-vnni"
#define Q16_NEEDS "avx_vnni"
#include "avx2_q16.c"
