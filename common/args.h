/*
 * args.h - checked parsing of numeric command-line values, shared by every
 * program. A value that is not a whole number (or is out of [lo, hi]) gets
 * one line on stderr naming the program, the flag, the value and the range.
 */
#ifndef SW_ARGS_H
#define SW_ARGS_H

/* Integer (decimal, or 0x hex) into *out. 0, or -1 after the error line. */
int sw_arg_int(const char *prog, const char *flag, const char *s, long lo, long hi, int *out)
    __attribute__((warn_unused_result));
/* Floating-point number into *out. 0, or -1 after the error line. */
int sw_arg_double(const char *prog, const char *flag, const char *s, double lo, double hi,
                  double *out) __attribute__((warn_unused_result));
int sw_arg_float(const char *prog, const char *flag, const char *s, double lo, double hi,
                 float *out) __attribute__((warn_unused_result));

#endif
