/* Helpers shared by the device tests. Test data (kernel bitcode, fixtures) is found in
 * $KILN_TEST_DATA, else next to the test executable, so a build directory can be copied to
 * another machine and run there. */
#ifndef KILN_TESTS_DEVICE_SUPPORT_H
#define KILN_TESTS_DEVICE_SUPPORT_H

#include <stddef.h>
#include <stdint.h>

/* The test data directory (no trailing slash). */
const char *kiln_test_data_dir(void);
/* Reads data file `name`; aborts the test with a message when it is missing. Caller frees. */
uint8_t *kiln_test_read_data(const char *name, size_t *out_len);

#endif
