/*
 * quant_types.c - the type traits of quant.h: names, block layouts (elements
 * and bytes per block, bit-compatible with GGML) and which activation type
 * each weight type is multiplied with. The GGUF reader uses these to size
 * tensors; the kernels (quant.c) use them to walk rows.
 *
 * The ids GGML defines that shardwire cannot compute (the IQ1/IQ2/IQ3 and
 * ternary types, MXFP4/NVFP4, Q1_0/Q2_0, the integer and f64 types) have
 * their name and block layout (GGML's sizes), so a file that uses them opens
 * and the model loader names each tensor it refuses; removed ids have
 * neither, and the GGUF reader refuses a tensor that uses one.
 */
#include "quant.h"

struct s_type_traits {
    const char *name; // GGML's name, or NULL for an id GGML removed
    int64_t blck;     // elements per block; 0 when the layout is unknown here
    size_t bytes;     // bytes per block; 0 when the layout is unknown here
    int supported;    // 1 when the kernels take this type: weights they load, or the
                      // activation types Q8_1 and Q8_K (no weights of those load)
    enum sw_type vec; // activation type of the dot product (SW_TYPE_COUNT: none)
};

/* Indexed by GGML type id. Block bytes: scale/min halves plus packed quants,
 * e.g. Q4_1 = 2 (d) + 2 (m) + 16 (32 nibbles) = 20; Q4_K = 2 + 2 + 12 (6-bit
 * scales and mins) + 128 = 144; Q8_K = 4 (f32 d) + 256 + 32 (i16 bsums) = 292. */
static const struct s_type_traits s_traits[SW_TYPE_COUNT] = {
    [SW_TYPE_F32] = {"f32", 1, 4, 1, SW_TYPE_F32},
    [SW_TYPE_F16] = {"f16", 1, 2, 1, SW_TYPE_F16},
    [SW_TYPE_Q4_0] = {"q4_0", 32, 18, 1, SW_TYPE_Q8_0},
    [SW_TYPE_Q4_1] = {"q4_1", 32, 20, 1, SW_TYPE_Q8_1},
    [SW_TYPE_Q5_0] = {"q5_0", 32, 22, 1, SW_TYPE_Q8_0},
    [SW_TYPE_Q5_1] = {"q5_1", 32, 24, 1, SW_TYPE_Q8_1},
    [SW_TYPE_Q8_0] = {"q8_0", 32, 34, 1, SW_TYPE_Q8_0},
    [SW_TYPE_Q8_1] = {"q8_1", 32, 36, 1, SW_TYPE_Q8_1},
    [SW_TYPE_Q2_K] = {"q2_K", 256, 84, 1, SW_TYPE_Q8_K},
    [SW_TYPE_Q3_K] = {"q3_K", 256, 110, 1, SW_TYPE_Q8_K},
    [SW_TYPE_Q4_K] = {"q4_K", 256, 144, 1, SW_TYPE_Q8_K},
    [SW_TYPE_Q5_K] = {"q5_K", 256, 176, 1, SW_TYPE_Q8_K},
    [SW_TYPE_Q6_K] = {"q6_K", 256, 210, 1, SW_TYPE_Q8_K},
    [SW_TYPE_Q8_K] = {"q8_K", 256, 292, 1, SW_TYPE_Q8_K},
    [16] = {"iq2_xxs", 256, 66, 0, SW_TYPE_COUNT},
    [17] = {"iq2_xs", 256, 74, 0, SW_TYPE_COUNT},
    [18] = {"iq3_xxs", 256, 98, 0, SW_TYPE_COUNT},
    [19] = {"iq1_s", 256, 50, 0, SW_TYPE_COUNT},
    [SW_TYPE_IQ4_NL] = {"iq4_nl", 32, 18, 1, SW_TYPE_Q8_0},
    [21] = {"iq3_s", 256, 110, 0, SW_TYPE_COUNT},
    [22] = {"iq2_s", 256, 82, 0, SW_TYPE_COUNT},
    [SW_TYPE_IQ4_XS] = {"iq4_xs", 256, 136, 1, SW_TYPE_Q8_K},
    [24] = {"i8", 1, 1, 0, SW_TYPE_COUNT},
    [25] = {"i16", 1, 2, 0, SW_TYPE_COUNT},
    [26] = {"i32", 1, 4, 0, SW_TYPE_COUNT},
    [27] = {"i64", 1, 8, 0, SW_TYPE_COUNT},
    [28] = {"f64", 1, 8, 0, SW_TYPE_COUNT},
    [29] = {"iq1_m", 256, 56, 0, SW_TYPE_COUNT},
    [SW_TYPE_BF16] = {"bf16", 1, 2, 1, SW_TYPE_BF16},
    [34] = {"tq1_0", 256, 54, 0, SW_TYPE_COUNT},
    [35] = {"tq2_0", 256, 66, 0, SW_TYPE_COUNT},
    [39] = {"mxfp4", 32, 17, 0, SW_TYPE_COUNT},
    [40] = {"nvfp4", 64, 36, 0, SW_TYPE_COUNT},
    [41] = {"q1_0", 128, 18, 0, SW_TYPE_COUNT},
    [42] = {"q2_0", 64, 18, 0, SW_TYPE_COUNT},
};

static const struct s_type_traits *s_get(enum sw_type t)
{
    if ((int)t < 0 || (int)t >= SW_TYPE_COUNT)
        return NULL;
    return &s_traits[t];
}

int sw_type_supported(enum sw_type t)
{
    const struct s_type_traits *tr = s_get(t);
    return tr && tr->supported;
}

const char *sw_type_name(enum sw_type t)
{
    const struct s_type_traits *tr = s_get(t);
    return tr && tr->name ? tr->name : "unknown";
}

int64_t sw_type_block_elems(enum sw_type t)
{
    const struct s_type_traits *tr = s_get(t);
    return tr ? tr->blck : 0;
}

size_t sw_type_block_bytes(enum sw_type t)
{
    const struct s_type_traits *tr = s_get(t);
    return tr ? tr->bytes : 0;
}

int sw_type_row_bytes(enum sw_type t, int64_t n, uint64_t *out)
{
    const struct s_type_traits *tr = s_get(t);
    if (!tr || tr->blck == 0 || n < 0 || n % tr->blck != 0)
        return -1;
    uint64_t blocks = (uint64_t)(n / tr->blck);
    if (blocks > UINT64_MAX / tr->bytes)
        return -1;
    *out = blocks * tr->bytes;
    return 0;
}

/* SW_TYPE_COUNT for a type that has no dot product here. */
enum sw_type sw_type_vec_dot(enum sw_type t)
{
    const struct s_type_traits *tr = s_get(t);
    return tr && tr->blck && tr->supported ? tr->vec : SW_TYPE_COUNT;
}
