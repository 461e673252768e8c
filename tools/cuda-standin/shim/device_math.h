// The stand-in's `expf` / `logf` for kernels: rounded like a GPU's libdevice, not like the
// host's libm.
//
// A GPU's expf / logf are accurate to about an ulp but are not the host's: their results
// differ from glibc's in the last bit on a share of inputs. If the stand-in ran kernels
// with the host's libm, a CPU and a "GPU" run would agree exactly and no test could show
// that ditto's default training path depends on the hardware (or that portable
// arithmetic, docs/contract.md §14, removes that dependence). So kernels built for the
// stand-in get these instead: Cody-Waite reduction and Taylor polynomials evaluated with
// fused multiply-adds, as GPU math libraries do, accurate to about 1 ulp (checked by
// tests/integration/gpu_portable.rs against the CPU with a tolerance; they differ in some last bits).
// f64 `exp` / `log` stay the host's.
#pragma once

#include <cmath>
#include <math.h>

inline float standin_device_expf(float x) {
    if (x != x) return x;
    if (x > 88.72283935546875f) return HUGE_VALF;
    if (x < -103.97208404541016f) return 0.0f;
    const float n = std::nearbyint(x * 1.44269502162933349609375f);
    float r = std::fma(n, -0.693145751953125f, x);  // ln 2, high part (exact product)
    r = std::fma(n, -1.428606765330187045e-06f, r);   // ln 2, low part
    float p = 1.0f / 5040.0f;
    p = std::fma(p, r, 1.0f / 720.0f);
    p = std::fma(p, r, 1.0f / 120.0f);
    p = std::fma(p, r, 1.0f / 24.0f);
    p = std::fma(p, r, 1.0f / 6.0f);
    p = std::fma(p, r, 0.5f);
    p = std::fma(p, r, 1.0f);
    p = std::fma(p, r, 1.0f);
    return std::ldexp(p, static_cast<int>(n));
}

inline float standin_device_logf(float x) {
    if (x != x) return x;
    if (x < 0.0f) return NAN;
    if (x == 0.0f) return -HUGE_VALF;
    if (x == HUGE_VALF) return x;
    int e = 0;
    float m = std::frexp(x, &e);  // x = m 2^e, m in [1/2, 1)
    if (m < 0.70710678f) {
        m *= 2.0f;
        e -= 1;
    }
    const float f = m - 1.0f;
    const float s = f / (2.0f + f);
    const float s2 = s * s;
    // log(1 + f) = 2 atanh(s) = 2s (1 + s^2/3 + s^4/5 + ...), |s| < 0.1716.
    float p = 2.0f / 13.0f;
    p = std::fma(p, s2, 2.0f / 11.0f);
    p = std::fma(p, s2, 2.0f / 9.0f);
    p = std::fma(p, s2, 2.0f / 7.0f);
    p = std::fma(p, s2, 2.0f / 5.0f);
    p = std::fma(p, s2, 2.0f / 3.0f);
    const float tail = s * s2 * p;
    const float ef = static_cast<float>(e);
    return std::fma(ef, 0.693145751953125f, std::fma(ef, 1.428606765330187045e-06f, tail) + 2.0f * s);
}

#define expf standin_device_expf
#define logf standin_device_logf
