/*
 * chi2.h - Pearson's chi-square goodness-of-fit test for the statistical unit
 * tests (sampler frequencies, speculative losslessness). Header-only so that
 * each test executable stays one file; the p-value is the regularized upper
 * incomplete gamma Q(dof / 2, stat / 2), by its power series below a + 1 and
 * by Lentz's continued fraction above.
 */
#ifndef SW_TEST_CHI2_H
#define SW_TEST_CHI2_H

#include <float.h>
#include <math.h>
#include <stdint.h>

/* Q(a, x) = Gamma(a, x) / Gamma(a), for a > 0, x >= 0. */
static double chi2_gamma_q(double a, double x)
{
    if (x <= 0.0)
        return 1.0;
    double front = exp(-x + a * log(x) - lgamma(a));
    if (x < a + 1.0) {
        /* P(a, x) = front * sum_n x^n / (a (a+1) ... (a+n)) */
        double term = 1.0 / a, sum = term, ap = a;
        for (int n = 0; n < 10000; n++) {
            ap += 1.0;
            term *= x / ap;
            sum += term;
            if (fabs(term) < fabs(sum) * 1e-16)
                break;
        }
        double q = 1.0 - front * sum;
        return q < 0.0 ? 0.0 : q;
    }
    /* Q(a, x) = front / (x + 1 - a - 1 (1 - a) / (x + 3 - a - 2 (2 - a) / (x + 5 - a - ...))) */
    double b = x + 1.0 - a, c = 1.0 / DBL_MIN, d = 1.0 / b, h = d;
    for (int i = 1; i < 10000; i++) {
        double an = -i * (i - a);
        b += 2.0;
        d = an * d + b;
        if (fabs(d) < DBL_MIN)
            d = DBL_MIN;
        c = b + an / c;
        if (fabs(c) < DBL_MIN)
            c = DBL_MIN;
        d = 1.0 / d;
        double del = d * c;
        h *= del;
        if (fabs(del - 1.0) < 1e-16)
            break;
    }
    return front * h;
}

/* Upper tail probability of a chi-square variable with dof degrees of freedom. */
static double chi2_sf(double stat, int dof)
{
    return chi2_gamma_q(0.5 * dof, 0.5 * stat);
}

/* Goodness of fit of counts[n] (total draws) to the distribution expect[n].
 * Cells with expect == 0 must be empty (else the p-value is 0); the others
 * give dof = cells - 1. Writes the statistic to *stat_out when non-NULL. */
static double chi2_pvalue(const uint64_t *counts, const double *expect, int n, double *stat_out)
{
    uint64_t total = 0;
    for (int i = 0; i < n; i++)
        total += counts[i];
    double stat = 0.0;
    int cells = 0, impossible = 0;
    for (int i = 0; i < n; i++) {
        double e = expect[i] * (double)total;
        if (expect[i] <= 0.0) {
            impossible |= counts[i] != 0;
            continue;
        }
        double dlt = (double)counts[i] - e;
        stat += dlt * dlt / e;
        cells++;
    }
    if (stat_out)
        *stat_out = stat;
    if (impossible)
        return 0.0;
    return cells < 2 ? 1.0 : chi2_sf(stat, cells - 1);
}

#endif
