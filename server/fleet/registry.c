/* The fleet registry (registry.h): a heartbeat of SET PX, SADD and a prune of the set. */
#include "server/fleet/registry.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <sodium.h>

#include "base/log.h"
#include "base/util.h"
#include "protocol/rpc.h"

#define HOST_PREFIX "kiln:host:"
#define HOSTS_SET "kiln:hosts"
#define TICK_MS 200

/* Members of the set whose record expired (their kilnd died) leave it. */
static const char prune_script[] =
    "local n = 0 "
    "for _, m in ipairs(redis.call('smembers', KEYS[1])) do "
    "  if redis.call('exists', ARGV[1] .. m) == 0 then redis.call('srem', KEYS[1], m); n = n + 1 end "
    "end return n";

struct kiln_registry {
  kiln_redis_t *redis;
  char advertise[256];
  char key[sizeof(HOST_PREFIX) + 256];
  uint32_t ttl_ms;
  uint64_t last_ok_ns;
  bool in_flight;
  kiln_registry_pack_cb pack;
  void *arg;
  bool sign;
  uint8_t seed[32]; /* --fleet-key */
  uv_timer_t tick;
  kiln_registry_stats_t st;
};

static void on_set(void *arg, const redisReply *r) {
  kiln_registry_t *reg = arg;
  reg->in_flight = false;
  if (r && r->type == REDIS_REPLY_STATUS) {
    reg->st.heartbeats++;
    reg->last_ok_ns = kiln_now_ns();
  } else {
    reg->st.heartbeat_errors++;
  }
}

static void ignore(void *arg, const redisReply *r) { (void)arg, (void)r; }

static void beat(kiln_registry_t *reg) {
  kiln_buf_t b;
  kiln_buf_init(&b);
  kiln_packer_t pk;
  kiln_packer_init(&pk, &b);
  reg->pack(reg->arg, &pk.pk);
  kiln_status_t st = kiln_packer_status(&pk);
  if (st) { /* out of memory: the next tick tries again */
    kiln_status_free(st);
    kiln_buf_deinit(&b);
    reg->st.heartbeat_errors++;
    return;
  }
  uint8_t *sealed = NULL;
  if (reg->sign && (!(sealed = malloc(KILN_RECORD_HEAD + b.len)) ||
                    !kiln_record_seal(reg->seed, b.data, b.len, sealed))) {
    free(sealed); /* out of memory: never an unsigned record in place of a signed one */
    kiln_buf_deinit(&b);
    reg->st.heartbeat_errors++;
    return;
  }
  char ttl[16];
  snprintf(ttl, sizeof(ttl), "%u", reg->ttl_ms);
  const char *set[] = {"SET", reg->key, sealed ? (const char *)sealed : (const char *)b.data, "PX", ttl};
  size_t lens[] = {3, strlen(reg->key), sealed ? KILN_RECORD_HEAD + b.len : b.len, 2, strlen(ttl)};
  if (kiln_redis_command(reg->redis, on_set, reg, 5, set, lens)) {
    reg->in_flight = true;
    const char *sadd[] = {"SADD", HOSTS_SET, reg->advertise};
    (void)kiln_redis_command(reg->redis, ignore, NULL, 3, sadd, NULL);
    const char *prune[] = {"EVAL", prune_script, "1", HOSTS_SET, HOST_PREFIX};
    (void)kiln_redis_command(reg->redis, ignore, NULL, 5, prune, NULL);
  }
  free(sealed);
  kiln_buf_deinit(&b);
}

static void on_tick(uv_timer_t *t) {
  kiln_registry_t *reg = t->data;
  if (reg->in_flight || !kiln_redis_up(reg->redis)) return;
  uint64_t every = (uint64_t)reg->ttl_ms * 1000000ull / 3;
  if (reg->last_ok_ns && kiln_now_ns() - reg->last_ok_ns < every) return;
  beat(reg);
}

kiln_status_t kiln_registry_create(uv_loop_t *loop, const kiln_registry_config_t *cfg,
                                   kiln_registry_pack_cb pack, void *arg, kiln_registry_t **out) {
  const char *a = cfg->advertise ? cfg->advertise : "";
  size_t n = strlen(a);
  bool scheme = strncmp(a, "tcp:", 4) == 0 || strncmp(a, "tls:", 4) == 0 || strncmp(a, "unix:", 5) == 0;
  if (!scheme || n < 6 || n > 255 || strpbrk(a, " \t\r\n"))
    return KILN_STATUS(KILN_E_INVALID_ARGUMENT,
                       "--fleet needs --advertise URL: how clients reach this kilnd (tcp:HOST:PORT, "
                       "tls:HOST:PORT or unix:PATH, at most 255 bytes); got '%.300s'", a);
  kiln_registry_t *reg = calloc(1, sizeof(*reg));
  if (!reg) return KILN_STATUS(KILN_E_RESOURCE_EXHAUSTED, "out of memory");
  kiln_status_t st = KILN_OK;
  if (cfg->key_file && cfg->key_file[0]) {
    st = kiln_record_key_read(cfg->key_file, reg->seed);
    reg->sign = !st;
  }
  if (!st) st = kiln_redis_create(loop, &cfg->redis, &reg->redis);
  if (st) {
    sodium_memzero(reg, sizeof(*reg));
    free(reg);
    return st;
  }
  memcpy(reg->advertise, a, n + 1);
  snprintf(reg->key, sizeof(reg->key), HOST_PREFIX "%s", a);
  reg->ttl_ms = cfg->ttl_ms ? cfg->ttl_ms : 15000;
  reg->pack = pack;
  reg->arg = arg;
  uv_timer_init(loop, &reg->tick);
  reg->tick.data = reg;
  uv_timer_start(&reg->tick, on_tick, TICK_MS, TICK_MS);
  uv_unref((uv_handle_t *)&reg->tick);
  *out = reg;
  return KILN_OK;
}

static void tick_closed(uv_handle_t *h) {
  kiln_registry_t *reg = h->data;
  sodium_memzero(reg->seed, sizeof(reg->seed));
  free(reg);
}

void kiln_registry_destroy(kiln_registry_t *reg) {
  if (!reg) return;
  kiln_redis_destroy(reg->redis);
  uv_close((uv_handle_t *)&reg->tick, tick_closed);
}

void kiln_registry_signer(const kiln_registry_t *reg, char *out) {
  uint8_t pub[32];
  if (reg->sign) kiln_record_key_public(reg->seed, pub, out);
  else snprintf(out, 73, "none");
}

void kiln_registry_stats(const kiln_registry_t *reg, kiln_registry_stats_t *out) {
  *out = reg->st;
  kiln_redis_stats(reg->redis, &out->redis);
}
