/* kiln-transfer: upload and download of one large float32 tensor through libkiln, timed
 * each way. Prints key=value results (GB = 1e9 bytes).
 *
 *   kiln-transfer --url unix:/run/kiln.sock --mib 256 --repeat 5 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/util.h"
#include "kiln/client.h"

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

static int die(const char *what, kiln_status_t s) {
  fprintf(stderr, "kiln-transfer: %s: %s: %s\n", what, kiln_code_name(kiln_status_code(s)),
          kiln_status_message(s));
  kiln_status_free(s);
  return 1;
}

int main(int argc, char **argv) {
  const char *url = NULL;
  size_t mib = 256;
  int repeat = 5;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!strcmp(argv[i], "--url")) url = argv[i + 1];
    else if (!strcmp(argv[i], "--mib")) mib = strtoull(argv[i + 1], NULL, 10);
    else if (!strcmp(argv[i], "--repeat")) repeat = atoi(argv[i + 1]);
    else {
      fprintf(stderr, "usage: kiln-transfer [--url URL] [--mib N] [--repeat R]\n");
      return 2;
    }
  }
  if (repeat < 1 || repeat > 100 || mib == 0) {
    fprintf(stderr, "kiln-transfer: --repeat must be 1..100 and --mib positive\n");
    return 2;
  }
  size_t bytes = mib << 20;
  float *data = malloc(bytes);
  if (!data) return die("allocating the tensor", KILN_STATUS(KILN_E_RESOURCE_EXHAUSTED, "%zu bytes", bytes));
  for (size_t i = 0; i < bytes / 4; i++) data[i] = (float)i;
  kiln_tensor_desc_t d = {.dtype = KILN_FLOAT32, .ndim = 1, .shape = {bytes / 4}, .nbytes = bytes};

  kiln_client_t *c;
  kiln_status_t s = kiln_client_create(url, &c);
  if (s) return die("connect", s);
  double up[100], down[100];
  for (int r = 0; r < repeat; r++) {
    uint64_t id, t0 = kiln_now_ns();
    if ((s = kiln_client_upload(c, NULL, &d, data, &id))) return die("upload", s);
    uint64_t t1 = kiln_now_ns();
    kiln_reply_t *reply;
    if ((s = kiln_client_download(c, id, &reply))) return die("download", s);
    uint64_t t2 = kiln_now_ns();
    kiln_tensor_desc_t got;
    const void *p;
    if ((s = kiln_reply_tensor(reply, &got, &p))) return die("download", s);
    if (got.nbytes != bytes || memcmp(p, data, bytes) != 0) {
      fprintf(stderr, "kiln-transfer: the tensor came back different\n");
      return 1;
    }
    kiln_reply_free(reply);
    if ((s = kiln_client_free_tensor(c, id))) return die("free", s);
    up[r] = (double)bytes / (double)(t1 - t0); /* bytes per ns = GB/s */
    down[r] = (double)bytes / (double)(t2 - t1);
  }
  kiln_client_destroy(c);
  qsort(up, (size_t)repeat, sizeof(double), cmp_double);
  qsort(down, (size_t)repeat, sizeof(double), cmp_double);
  printf("mib=%zu repeat=%d upload_gbps_best=%.2f upload_gbps_median=%.2f "
         "download_gbps_best=%.2f download_gbps_median=%.2f\n",
         mib, repeat, up[repeat - 1], up[repeat / 2], down[repeat - 1], down[repeat / 2]);
  free(data);
  return 0;
}
