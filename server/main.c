/* kilnd: the kiln daemon. Parses options, probes devices, starts listeners, runs the loop,
 * drains on SIGTERM/SIGINT. */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#ifdef KILN_HAVE_SYSTEMD
#include <systemd/sd-daemon.h>
#endif

#include "base/log.h"
#include "base/util.h"
#include "server/cache_admin.h"
#include "server/compile.h"
#include "server/fleet_host.h"
#include "server/metrics.h"
#include "server/tls.h"

static const char *metrics_spec; /* --metrics */

static void usage(FILE *f) {
  fprintf(f,
          "usage: kilnd [options]\n"
          "  --listen ADDR         tcp:HOST:PORT, tls:HOST:PORT or unix:PATH (repeatable; port 0\n"
          "                        picks a free port). Default: only the unix socket\n"
          "                        $XDG_RUNTIME_DIR/kiln.sock (else /tmp/kiln-$UID/kiln.sock);\n"
          "                        tcp: without --tokens admits every local user\n"
          "  --tls-cert FILE       certificate chain (PEM) of tls: listeners\n"
          "  --tls-key FILE        its private key (PEM)\n"
          "  --tls-client-ca FILE  require client certificates issued by this CA (PEM)\n"
          "  --handshake-timeout S close a TLS connection whose handshake takes longer (default 10)\n"
          "  --insecure-tcp        allow tcp: beyond loopback (tokens and data in clear)\n"
          "  --ready-fd N          when every listener is up, write one line per listener with\n"
          "                        its bound address to fd N, then close it\n"
          "  --cache-dir DIR       artifact cache (default $XDG_CACHE_HOME/kiln)\n"
          "  --devices LIST        devices to serve: ids or kinds, comma-separated (default all)\n"
          "  --log-level LEVEL     debug, info, warn, error (default info)\n"
          "  --max-connections N   default 1024\n"
          "  --max-message BYTES   largest message accepted (default 1 GiB + 1 MiB)\n"
          "  --idle-timeout S      close connections idle this long (default 300)\n"
          "  --partial-timeout S   close a connection that sends no byte of an unfinished\n"
          "                        message for this long while kilnd reads (default 30)\n"
          "  --grace S             drain period on SIGTERM/SIGINT (default 10)\n"
          "  --hello-timeout S     with --tokens: close a connection that has not completed\n"
          "                        hello this long after connecting (default 10)\n"
          "  --max-anonymous N     with --tokens: connections without hello at once; the\n"
          "                        oldest is closed for a newcomer (default 64)\n"
          "  --max-anonymous-per-peer N  of those, from one address (default 8)\n"
          "  --worker-dir DIR      where the worker binaries are (default: next to kilnd)\n"
          "  --hsa-library PATH    the ROCm runtime hsa:N devices use (default libhsa-runtime64.so.1\n"
          "                        from the library path; e.g. the software GPU, docs/softgpu.md)\n"
          "  --pin DEVICE=CPUS     run DEVICE's workers on these host cores (cpu:0=0-1);\n"
          "                        DEVICE compile: the compile workers (compile=1). Repeatable\n"
          "  --tokens FILE         tokens -> tenants, devices, quotas (docs/operations.md);\n"
          "                        reloaded on SIGHUP. Required to listen beyond loopback\n"
          "  --metrics tcp:HOST:PORT  serve Prometheus metrics at http://HOST:PORT/metrics\n"
          "                        (no authentication; see docs/operations.md)\n"
          "  --compile-workers N   compile worker processes (default: number of cores, or of\n"
          "                        --pin compile's)\n"
          "  --compile-timeout S   time limit of one compile (default 60)\n"
          "  --launch-timeout S    default deadline of one launch (default 60; 0: none)\n"
          "  --compile-max-memory BYTES  address-space limit of a compile worker (default 8 GiB)\n"
          "  --cache-max-bytes BYTES     disk bound of the artifact cache (default 4 GiB)\n"
          "  --cpu-memory BYTES    tensor bytes cpu:0 may hold, all tenants (K M G T; default:\n"
          "                        half of RAM or of kilnd's cgroup memory.max if smaller)\n"
          "  --worker-uids FIRST-LAST  when kilnd runs as root: compile workers run as FIRST,\n"
          "                        each tenant's device workers as FIRST + its index (unused\n"
          "                        uids; default: every worker as nobody)\n"
          "  --allow-prebuilt-cpu  accept prebuilt cpu shared objects (their code cannot be\n"
          "                        checked; they run inside the device worker's sandbox)\n"
          "  --config FILE         options as `key = value` lines (a flag: `key = true`), read\n"
          "                        before the command line, which wins (docs/operations.md)\n"
          "  --socket-mode MODE    permissions of unix: sockets, octal (default 0600, or 0660\n"
          "                        with --socket-group); connecting needs write permission\n"
          "  --socket-group GROUP  group of unix: sockets (a name or number; kilnd's user must\n"
          "                        be a member)\n"
          "  --cache-remote URL    share artifacts through Redis: redis://HOST:PORT/DB or\n"
          "                        unix:PATH[?db=N] (docs/operations.md \"A fleet\")\n"
          "  --cache-remote-auth-file FILE  Redis AUTH: one line, PASSWORD or USER PASSWORD\n"
          "  --fleet-secret-file FILE  the fleet's MAC key (32+ bytes, same on every host)\n"
          "  --cache-remote-max-bytes BYTES  largest artifact shared (default 64 MiB)\n"
          "  --cache-remote-timeout S  deadline of one Redis command (default 2)\n"
          "  --cache-remote-wait S     longest wait for another host's build (default 60)\n"
          "  --fleet URL           publish this host in the fleet registry on Redis (same URL\n"
          "                        forms as --cache-remote); needs --advertise\n"
          "  --advertise URL       how clients reach this kilnd: tcp:HOST:PORT or tls:HOST:PORT\n"
          "  --fleet-auth-file FILE  Redis AUTH of --fleet (default: --cache-remote-auth-file)\n"
          "  --fleet-ttl S         the record's TTL; a heartbeat every third of it (default 15)\n"
          "  --fleet-key FILE      sign the record with this Ed25519 seed (`kiln fleet-key FILE`)\n"
          "  --version, --help\n");
}

static void default_cache_dir(char *out, size_t cap) {
  const char *x = getenv("XDG_CACHE_HOME");
  const char *home = getenv("HOME");
  if (x && x[0]) snprintf(out, cap, "%s/kiln", x);
  else if (home && home[0]) snprintf(out, cap, "%s/.cache/kiln", home);
  else snprintf(out, cap, "/tmp/kiln-cache-%u", (unsigned)getuid());
}

static bool parse_double(const char *s, double *out) {
  char *end;
  errno = 0;
  double v = strtod(s, &end);
  if (errno || end == s || *end || v < 0) return false;
  *out = v;
  return true;
}

static bool parse_u64(const char *s, uint64_t *out) {
  char *end;
  errno = 0;
  unsigned long long v = strtoull(s, &end, 10);
  if (errno || end == s || *end || s[0] == '-') return false;
  *out = v;
  return true;
}

enum { O_LISTEN = 256, O_READY, O_CACHE, O_DEVICES, O_LOG, O_MAXCONN, O_MAXMSG, O_IDLE,
       O_PARTIAL, O_GRACE, O_WORKERS, O_VERSION, O_HELP, O_CWORKERS, O_CTIMEOUT, O_LTIMEOUT, O_CMEM,
       O_CACHEMAX, O_TOKENS, O_PIN, O_METRICS, O_CPUMEM, O_HSALIB,
       O_HELLO_TIMEOUT, O_MAX_ANON, O_MAX_ANON_PEER, O_WUIDS, O_PREBUILT, O_TLS_CERT,
       O_TLS_KEY, O_TLS_CA, O_HANDSHAKE, O_INSECURE, O_CONFIG, O_SOCK_MODE,
       O_SOCK_GROUP, O_REMOTE, O_REMOTE_AUTH, O_FLEET_SECRET, O_REMOTE_MAX, O_REMOTE_TIMEOUT,
       O_REMOTE_WAIT, O_FLEET, O_ADVERTISE, O_FLEET_AUTH, O_FLEET_TTL, O_FLEET_KEY };
static const struct option opts[] = {
    {"listen", required_argument, 0, O_LISTEN},
    {"ready-fd", required_argument, 0, O_READY},
    {"cache-dir", required_argument, 0, O_CACHE},
    {"devices", required_argument, 0, O_DEVICES},
    {"log-level", required_argument, 0, O_LOG},
    {"max-connections", required_argument, 0, O_MAXCONN},
    {"max-message", required_argument, 0, O_MAXMSG},
    {"idle-timeout", required_argument, 0, O_IDLE},
    {"partial-timeout", required_argument, 0, O_PARTIAL},
    {"grace", required_argument, 0, O_GRACE},
    {"worker-dir", required_argument, 0, O_WORKERS},
    {"version", no_argument, 0, O_VERSION},
    {"help", no_argument, 0, O_HELP},
    {"compile-workers", required_argument, 0, O_CWORKERS},
    {"compile-timeout", required_argument, 0, O_CTIMEOUT},
    {"launch-timeout", required_argument, 0, O_LTIMEOUT},
    {"compile-max-memory", required_argument, 0, O_CMEM},
    {"cache-max-bytes", required_argument, 0, O_CACHEMAX},
    {"tokens", required_argument, 0, O_TOKENS},
    {"pin", required_argument, 0, O_PIN},
    {"metrics", required_argument, 0, O_METRICS},
    {"cpu-memory", required_argument, 0, O_CPUMEM},
    {"hsa-library", required_argument, 0, O_HSALIB},
    {"hello-timeout", required_argument, 0, O_HELLO_TIMEOUT},
    {"max-anonymous", required_argument, 0, O_MAX_ANON},
    {"max-anonymous-per-peer", required_argument, 0, O_MAX_ANON_PEER},
    {"worker-uids", required_argument, 0, O_WUIDS},
    {"allow-prebuilt-cpu", no_argument, 0, O_PREBUILT},
    {"tls-cert", required_argument, 0, O_TLS_CERT},
    {"tls-key", required_argument, 0, O_TLS_KEY},
    {"tls-client-ca", required_argument, 0, O_TLS_CA},
    {"handshake-timeout", required_argument, 0, O_HANDSHAKE},
    {"insecure-tcp", no_argument, 0, O_INSECURE},
    {"config", required_argument, 0, O_CONFIG},
    {"socket-mode", required_argument, 0, O_SOCK_MODE},
    {"socket-group", required_argument, 0, O_SOCK_GROUP},
    {"cache-remote", required_argument, 0, O_REMOTE},
    {"cache-remote-auth-file", required_argument, 0, O_REMOTE_AUTH},
    {"fleet-secret-file", required_argument, 0, O_FLEET_SECRET},
    {"cache-remote-max-bytes", required_argument, 0, O_REMOTE_MAX},
    {"cache-remote-timeout", required_argument, 0, O_REMOTE_TIMEOUT},
    {"cache-remote-wait", required_argument, 0, O_REMOTE_WAIT},
    {"fleet", required_argument, 0, O_FLEET},
    {"advertise", required_argument, 0, O_ADVERTISE},
    {"fleet-auth-file", required_argument, 0, O_FLEET_AUTH},
    {"fleet-ttl", required_argument, 0, O_FLEET_TTL},
    {"fleet-key", required_argument, 0, O_FLEET_KEY},
    {0, 0, 0, 0}};

/* The option a config key names, as getopt_long takes it: the exact name or an unambiguous
 * prefix. NULL when none or several match. */
static const struct option *find_option(const char *key) {
  const struct option *hit = NULL;
  size_t len = strlen(key);
  for (const struct option *o = opts; o->name; o++) {
    if (!strcmp(o->name, key)) return o;
    if (!strncmp(o->name, key, len)) {
      if (hit) return NULL;
      hit = o;
    }
  }
  return hit;
}

static int parse_args(int argc, char **argv, kiln_config_t *cfg) {
  uint64_t u;
  int o;
  while ((o = getopt_long(argc, argv, "", opts, NULL)) != -1) {
    switch (o) {
      case O_LISTEN:
        if (cfg->num_listen == KILN_MAX_LISTENERS) {
          fprintf(stderr, "kilnd: at most %d --listen options\n", KILN_MAX_LISTENERS);
          return 2;
        }
        cfg->listen[cfg->num_listen++] = optarg;
        break;
      case O_READY:
        if (!parse_u64(optarg, &u) || u > INT_MAX) goto bad;
        cfg->ready_fd = (int)u;
        break;
      case O_CACHE: snprintf(cfg->cache_dir, sizeof(cfg->cache_dir), "%s", optarg); break;
      case O_DEVICES: snprintf(cfg->devices, sizeof(cfg->devices), "%s", optarg); break;
      case O_WORKERS: snprintf(cfg->worker_dir, sizeof(cfg->worker_dir), "%s", optarg); break;
      case O_LOG: {
        int l = kiln_log_level_parse(optarg);
        if (l < 0) goto bad;
        kiln_log_set_level((kiln_log_level_t)l);
        break;
      }
      case O_MAXCONN:
        if (!parse_u64(optarg, &u) || u == 0 || u > 1000000) goto bad;
        cfg->max_connections = (uint32_t)u;
        break;
      case O_MAXMSG:
        if (!parse_u64(optarg, &u) || u < 1024) goto bad;
        cfg->limits.max_message = u;
        break;
      case O_IDLE: if (!parse_double(optarg, &cfg->idle_timeout_s)) goto bad; break;
      case O_PARTIAL: if (!parse_double(optarg, &cfg->partial_timeout_s)) goto bad; break;
      case O_GRACE: if (!parse_double(optarg, &cfg->grace_s)) goto bad; break;
      case O_CWORKERS:
        if (!parse_u64(optarg, &u) || u == 0 || u > 256) goto bad;
        cfg->compile_workers = (uint32_t)u;
        break;
      case O_CTIMEOUT: if (!parse_double(optarg, &cfg->compile_timeout_s) || cfg->compile_timeout_s <= 0) goto bad; break;
      case O_LTIMEOUT: if (!parse_double(optarg, &cfg->launch_timeout_s) || cfg->launch_timeout_s < 0) goto bad; break;
      case O_CMEM:
        if (!parse_u64(optarg, &u) || u < (64u << 20)) goto bad;
        cfg->compile_max_memory = u;
        break;
      case O_CACHEMAX:
        if (!parse_u64(optarg, &u)) goto bad;
        cfg->cache_max_bytes = u;
        break;
      case O_CPUMEM: {
        kiln_status_t st = kiln_size_parse(optarg, &cfg->cpu_memory);
        bool ok = !st && cfg->cpu_memory >= (1u << 20) && cfg->cpu_memory != UINT64_MAX;
        kiln_status_free(st);
        if (!ok) goto bad;
        break;
      }
      case O_TOKENS: snprintf(cfg->tokens, sizeof(cfg->tokens), "%s", optarg); break;
      case O_REMOTE: snprintf(cfg->cache_remote, sizeof(cfg->cache_remote), "%s", optarg); break;
      case O_REMOTE_AUTH: snprintf(cfg->cache_remote_auth, sizeof(cfg->cache_remote_auth), "%s", optarg); break;
      case O_FLEET_SECRET: snprintf(cfg->fleet_secret_file, sizeof(cfg->fleet_secret_file), "%s", optarg); break;
      case O_REMOTE_MAX: {
        kiln_status_t st = kiln_size_parse(optarg, &cfg->cache_remote_max_bytes);
        bool ok = !st && cfg->cache_remote_max_bytes >= 1024 && cfg->cache_remote_max_bytes <= (1ull << 30);
        kiln_status_free(st);
        if (!ok) goto bad;
        break;
      }
      case O_REMOTE_TIMEOUT:
        if (!parse_double(optarg, &cfg->cache_remote_timeout_s) || cfg->cache_remote_timeout_s < 0.001 ||
            cfg->cache_remote_timeout_s > 3600) goto bad;
        break;
      case O_FLEET: snprintf(cfg->fleet, sizeof(cfg->fleet), "%s", optarg); break;
      case O_ADVERTISE:
        if (strlen(optarg) >= sizeof(cfg->advertise)) goto bad;
        snprintf(cfg->advertise, sizeof(cfg->advertise), "%s", optarg);
        break;
      case O_FLEET_AUTH: snprintf(cfg->fleet_auth, sizeof(cfg->fleet_auth), "%s", optarg); break;
      case O_FLEET_KEY: snprintf(cfg->fleet_key, sizeof(cfg->fleet_key), "%s", optarg); break;
      case O_FLEET_TTL:
        if (!parse_double(optarg, &cfg->fleet_ttl_s) || cfg->fleet_ttl_s < 0.3 || cfg->fleet_ttl_s > 3600) goto bad;
        break;
      case O_REMOTE_WAIT:
        if (!parse_double(optarg, &cfg->cache_remote_wait_s) || cfg->cache_remote_wait_s > 86400) goto bad;
        break;
      case O_METRICS:
        if (strncmp(optarg, "tcp:", 4) != 0) goto bad;
        metrics_spec = optarg;
        break;
      case O_PIN: {
        /* DEVICE=CPULIST, e.g. cpu:0=0-1 or cuda:0=2; checked again by the worker. */
        const char *eq = strchr(optarg, '=');
        if (!eq || eq == optarg || !eq[1] || cfg->num_pins == KILN_MAX_LISTENERS ||
            strspn(eq + 1, "0123456789,-") != strlen(eq + 1))
          goto bad;
        cfg->pins[cfg->num_pins++] = optarg;
        break;
      }
      case O_HSALIB: {
        /* Device workers (and the probe) dlopen $KILN_HSA_LIBRARY; an absolute path, because
         * workers do not run in kilnd's working directory. */
        char abs[PATH_MAX];
        if (!realpath(optarg, abs)) {
          fprintf(stderr, "kilnd: --hsa-library %s: %s\n", optarg, strerror(errno));
          return 2;
        }
        setenv("KILN_HSA_LIBRARY", abs, 1);
        break;
      }
      case O_HELLO_TIMEOUT:
        if (!parse_double(optarg, &cfg->hello_timeout_s) || cfg->hello_timeout_s <= 0) goto bad;
        break;
      case O_MAX_ANON:
      case O_MAX_ANON_PEER:
        if (!parse_u64(optarg, &u) || u == 0 || u > 1000000) goto bad;
        *(o == O_MAX_ANON ? &cfg->max_anonymous : &cfg->max_anonymous_per_peer) = (uint32_t)u;
        break;
      case O_WUIDS: {
        unsigned long a, b;
        int end = 0;
        if (sscanf(optarg, "%lu-%lu%n", &a, &b, &end) != 2 || optarg[end] || a == 0 || b < a ||
            b > 0x7fffffffUL)
          goto bad;
        cfg->worker_uid_first = (uint32_t)a;
        cfg->worker_uid_last = (uint32_t)b;
        break;
      }
      case O_PREBUILT: cfg->allow_prebuilt_cpu = true; break;
      case O_TLS_CERT: snprintf(cfg->tls_cert, sizeof(cfg->tls_cert), "%s", optarg); break;
      case O_TLS_KEY: snprintf(cfg->tls_key, sizeof(cfg->tls_key), "%s", optarg); break;
      case O_TLS_CA: snprintf(cfg->tls_client_ca, sizeof(cfg->tls_client_ca), "%s", optarg); break;
      case O_HANDSHAKE:
        if (!parse_double(optarg, &cfg->handshake_timeout_s) || cfg->handshake_timeout_s <= 0)
          goto bad;
        break;
      case O_INSECURE: cfg->insecure_tcp = true; break;
      case O_CONFIG: break; /* read before the command line (load_config) */
      case O_SOCK_MODE:
      case O_SOCK_GROUP:
        if (!kiln_socket_option(cfg, o == O_SOCK_MODE, optarg)) goto bad;
        break;
      case O_VERSION: printf("kilnd %s\n", KILN_VERSION); exit(0);
      case O_HELP: usage(stdout); exit(0);
      default: usage(stderr); return 2;
    }
    continue;
  bad:
    fprintf(stderr, "kilnd: bad value '%s' for --%s\n", optarg, opts[o - O_LISTEN].name);
    return 2;
  }
  if (optind < argc) {
    fprintf(stderr, "kilnd: unexpected argument '%s'\n", argv[optind]);
    usage(stderr);
    return 2;
  }
  return 0;
}

/* --config FILE (docs/operations.md "Configuration file"): every long option as a
 * `key = value` line, a flag as `key = true` (false: absent), '#' starts a comment line.
 * Each line goes through parse_args as "--key=value", so a file accepts exactly what the
 * command line does and checks it the same way. The file is read first and the command line
 * after it: the command line wins, and a repeatable option given there (--listen, --pin)
 * replaces the file's. The argument strings live as long as the process (cfg and
 * metrics_spec keep pointers into them). */
static const char *config_path(int argc, char **argv) {
  for (int i = 1; i < argc && strcmp(argv[i], "--") != 0; i++) {
    if (strcmp(argv[i], "--config") == 0) return i + 1 < argc ? argv[i + 1] : "";
    if (strncmp(argv[i], "--config=", 9) == 0) return argv[i] + 9;
  }
  return NULL;
}

static bool on_command_line(int argc, char **argv, const char *name) {
  for (int i = 1; i < argc && strcmp(argv[i], "--") != 0; i++) {
    if (strncmp(argv[i], "--", 2) != 0) continue;
    /* getopt_long takes an unambiguous prefix (--lis=X is --listen=X): so does this */
    const char *opt = argv[i] + 2;
    size_t len = strcspn(opt, "=");
    if (len > 0 && len <= strlen(name) && strncmp(opt, name, len) == 0) return true;
  }
  return false;
}

static char *trim(char *p) {
  while (*p == ' ' || *p == '\t') p++;
  char *e = p + strlen(p);
  while (e > p && (e[-1] == ' ' || e[-1] == '\t' || e[-1] == '\n' || e[-1] == '\r')) *--e = 0;
  return p;
}

static int load_config(const char *path, kiln_config_t *cfg) {
  FILE *f = path[0] ? fopen(path, "r") : NULL;
  if (!f) {
    fprintf(stderr, "kilnd: --config %s: %s\n", path, path[0] ? strerror(errno) : "no file named");
    return 2;
  }
  char line[4096];
  int lineno = 0, rc = 0;
  while (!rc && fgets(line, sizeof(line), f)) {
    lineno++;
    const char *why = NULL;
    size_t len = strlen(line);
    char *p = trim(line), *eq = strchr(p, '=');
    if (len == sizeof(line) - 1 && line[len - 1] != '\n') why = "line longer than 4095 bytes";
    else if (!p[0] || p[0] == '#') continue;
    else if (!eq) why = "expected `key = value`";
    if (!why) {
      *eq = 0;
      char *key = trim(p), *val = trim(eq + 1);
      size_t vl = strlen(val);
      if (vl >= 2 && val[0] == '"' && val[vl - 1] == '"') val[vl - 1] = 0, val++;
      if (!key[0] || strspn(key, "abcdefghijklmnopqrstuvwxyz0123456789-") != strlen(key))
        why = "a key is an option's long name (listen, cache-dir, ...)";
      else if (!strcmp(key, "config") || !strcmp(key, "help") || !strcmp(key, "version"))
        why = "this option has no place in a configuration file";
      else if (!strcmp(val, "false") || !strcmp(val, "no") || !strcmp(val, "off")) {
        /* false leaves a flag off; for an option with a value it is no value at all (an unknown
         * key goes on to parse_args, which names it) */
        const struct option *opt = find_option(key);
        if (!opt || opt->has_arg == no_argument) {
          if (opt) continue;
        } else {
          why = "false/no/off turns a flag off, and this option takes a value (leave the line "
                "out for its default)";
        }
      }
      if (!why) {
        bool flag = !strcmp(val, "true") || !strcmp(val, "yes") || !strcmp(val, "on");
        size_t cap = strlen(key) + strlen(val) + 4;
        char *arg = malloc(cap); /* kept: see above */
        if (!arg) why = "out of memory";
        else {
          snprintf(arg, cap, flag ? "--%s" : "--%s=%s", key, val);
          char kilnd_name[] = "kilnd";
          char *args[] = {kilnd_name, arg, NULL};
          optind = 0; /* glibc: start getopt afresh */
          rc = parse_args(2, args, cfg);
          if (rc) fprintf(stderr, "kilnd: %s:%d: the line above is `%s = %s`\n", path, lineno, key, val);
        }
      }
    }
    if (why) {
      fprintf(stderr, "kilnd: %s:%d: %s\n", path, lineno, why);
      rc = 2;
    }
  }
  fclose(f);
  return rc;
}

/* Every connection, worker channel, payload and cache write holds a descriptor: the soft
 * limit (1024 under systemd) goes up to the hard one, which is the operator's to set. */
static void raise_nofile(void) {
  struct rlimit rl;
  if (getrlimit(RLIMIT_NOFILE, &rl) != 0 || rl.rlim_cur >= rl.rlim_max) return;
  rlim_t was = rl.rlim_cur;
  rl.rlim_cur = rl.rlim_max;
  if (setrlimit(RLIMIT_NOFILE, &rl) == 0)
    KILN_LOG_INFO("nofile_raised", "from=%llu to=%llu", (unsigned long long)was,
                   (unsigned long long)rl.rlim_max);
}

static void on_drain_timeout(uv_timer_t *t) {
  kiln_server_t *s = t->data;
  if (s->drain_finished) {
    /* Past the flush deadline (or a second signal): what clients have not read is dropped. */
    for (kiln_conn_t *c = s->conns; c;) {
      kiln_conn_t *n = c->next;
      kiln_conn_close(c);
      c = n;
    }
    return;
  }
  KILN_LOG_WARN("drain_timeout", "grace_s=%.1f conns=%u inflight=%llu", s->cfg.grace_s,
                s->num_conns, (unsigned long long)s->total_inflight);
  /* Past the grace period nothing more is waited for: work still in flight is answered
   * E_CANCELLED. */
  s->drain_forced = true;
  kiln_server_maybe_finish_drain(s);
}

static void close_walk_cb(uv_handle_t *h, void *arg) {
  if (!uv_is_closing(h)) uv_close(h, NULL);
}

void kiln_server_maybe_finish_drain(kiln_server_t *s) {
  if (!s->draining) return;
  if (s->drain_finished) {
    /* The last connection has flushed its answers: the loop ends when every handle closes. */
    if (s->num_conns == 0 && !s->drain_walked) {
      s->drain_walked = true;
      uv_walk(s->loop, close_walk_cb, NULL);
      /* Closing the last signal watcher gave SIGTERM and SIGINT their default action back
       * (libuv restores it): a second signal from now on must not kill us instead of the
       * exit 0 we are heading for. */
      signal(SIGTERM, SIG_IGN);
      signal(SIGINT, SIG_IGN);
    }
    return;
  }
  if (s->total_inflight > 0 && !s->drain_forced) return;
  s->drain_finished = true;
  /* Workers first, while connections are open: the requests they held are answered
   * E_CANCELLED; then every request still in flight (queued compiles, held launches) is, and
   * each connection closes once its answers are written. */
  kiln_graphs_shutdown(s);
  kiln_compile_shutdown(s);
  kiln_fleet_host_stop(s);
  kiln_metrics_stop(s);
  for (uint32_t i = 0; i < s->num_devices; i++) {
    size_t it = 0;
    void *v;
    while (kiln_map_next(&s->devices[i].slots, &it, NULL, &v)) {
      kiln_dslot_t *sl = v;
      if (sl->worker) kiln_worker_destroy(sl->worker);
      sl->worker = NULL;
    }
  }
  kiln_conns_cancel_and_close(s);
  /* A client that does not read its answers does not hold the exit up for long. */
  uv_timer_start(&s->drain_timer, on_drain_timeout, 2000, 0);
  kiln_server_maybe_finish_drain(s);
}

static void on_signal(uv_signal_t *h, int signum) {
  kiln_server_t *s = h->data;
  if (signum == SIGPIPE) return;
  if (signum == SIGHUP) {
    kiln_status_t st = s->tls_ctx ? kiln_tls_ctx_reload(s->tls_ctx) : KILN_OK;
    if (st) {
      KILN_LOG_ERROR("tls_reload_failed", "message=\"%s\" action=kept_old_certificate",
                     kiln_status_message(st));
      kiln_status_free(st);
    }
    st = kiln_tenants_reload(&s->tenants);
    if (st) {
      KILN_LOG_ERROR("tokens_reload_failed", "message=\"%s\" action=kept_old_tokens",
                     kiln_status_message(st));
      kiln_status_free(st);
      return;
    }
    kiln_compile_quotas_changed(s);
    kiln_tenants_revoke(s);
    return;
  }
  if (s->draining) {
    KILN_LOG_WARN("signal_again", "signal=%d action=exit_now", signum);
    on_drain_timeout(&s->drain_timer);
    return;
  }
  KILN_LOG_INFO("drain", "signal=%d inflight=%llu grace_s=%.1f", signum,
                (unsigned long long)s->total_inflight, s->cfg.grace_s);
  s->draining = true;
#ifdef KILN_HAVE_SYSTEMD
  sd_notify(0, "STOPPING=1");
#endif
  kiln_listeners_close(s);
  uv_timer_stop(&s->sweep_timer);
  uv_timer_start(&s->drain_timer, on_drain_timeout, (uint64_t)(s->cfg.grace_s * 1000), 0);
  kiln_server_maybe_finish_drain(s);
}

static void on_sweep(uv_timer_t *t) { kiln_hooks_fire(t->data, KILN_EVENT_SWEEP, NULL); }

/* --- who hears the lifecycle events (server.h) --------------------------------------------- */

static void sweep_tensors(kiln_server_t *s, void *arg) { (void)arg; kiln_tensors_sweep(s); }
static void sweep_devices(kiln_server_t *s, void *arg) { (void)arg; kiln_devices_watchdog(s); }
static void sweep_conns(kiln_server_t *s, void *arg) { (void)arg; kiln_conns_sweep(s); }
static void closed_leases(kiln_server_t *s, void *conn) { kiln_devices_conn_closed(s, conn); }
static void closed_launches(kiln_server_t *s, void *conn) { kiln_launches_conn_closed(s, conn); }
static void closed_tensors(kiln_server_t *s, void *conn) { kiln_tensors_conn_closed(s, conn); }
static void settled(kiln_server_t *s, void *arg) { (void)arg; kiln_server_maybe_finish_drain(s); }
static void reclaim_tensors(kiln_server_t *s, void *arg) { (void)arg; kiln_tensors_reap(s); }

/* What connections hand up: whole messages to dispatch, shutdown's cancel to the requests,
 * large messages into the tensors' shared-memory pool. */
static const kiln_conn_handler_t conn_handler = {
    .message = kiln_dispatch,
    .cancel_requests = kiln_reqs_cancel,
    .reader_alloc = kiln_tensor_reader_alloc,
};

static void add_hooks(kiln_server_t *s) {
  /* The sweep in the order it always ran: pooled memory and lost tensors, the launch
   * watchdog, then connections (idle heap, peers, timeouts). */
  kiln_hook_add(s, KILN_EVENT_SWEEP, sweep_tensors);
  kiln_hook_add(s, KILN_EVENT_SWEEP, sweep_devices);
  kiln_hook_add(s, KILN_EVENT_SWEEP, sweep_conns);
  /* A closed connection ends its leases and held launches, then cancels its running ones. */
  kiln_hook_add(s, KILN_EVENT_CONN_CLOSED, closed_leases);
  kiln_hook_add(s, KILN_EVENT_CONN_CLOSED, closed_launches);
  kiln_hook_add(s, KILN_EVENT_CONN_CLOSED, kiln_graphs_conn_closed);
  kiln_hook_add(s, KILN_EVENT_CONN_CLOSED, closed_tensors); /* after its launches: they used them */
  kiln_hook_add(s, KILN_EVENT_SETTLED, settled);
  kiln_hook_add(s, KILN_EVENT_RECLAIM, reclaim_tensors);
  /* /metrics: the families other parts count, after the request and error families. */
  kiln_metrics_collector_add(kiln_compile_collect);
  kiln_metrics_collector_add(kiln_graphs_collect);
  kiln_metrics_collector_add(kiln_devices_collect);
}

int main(int argc, char **argv) {
  kiln_server_t *s = kiln_server_get();
  kiln_config_t *cfg = &s->cfg;
  cfg->ready_fd = -1;
  cfg->max_connections = 1024;
  cfg->idle_timeout_s = 300;
  cfg->partial_timeout_s = 30;
  cfg->grace_s = 10;
  cfg->hello_timeout_s = 10;
  cfg->handshake_timeout_s = 10;
  cfg->max_anonymous = 64;
  cfg->max_anonymous_per_peer = 8;
  cfg->max_inflight = 256;
  cfg->max_unsent_bytes = 64ull << 20;
  cfg->socket_mode = (uint32_t)-1; /* -1: 0600, or 0660 with a group; see below */
  cfg->socket_gid = (uint32_t)-1;
  kiln_limits_default(&cfg->limits);
  /* 0: one compile worker per core of --pin compile=CPUS, or per core kilnd may run on
   * (taskset, a cgroup cpuset), not per core of the machine (compile.c). */
  cfg->compile_workers = 0;
  cfg->compile_timeout_s = 60;
  cfg->launch_timeout_s = 60;
  cfg->compile_max_memory = 8ull << 30;
  cfg->cache_max_bytes = 4ull << 30;
  cfg->fleet_ttl_s = 15;
  default_cache_dir(cfg->cache_dir, sizeof(cfg->cache_dir));
  const char *conf = config_path(argc, argv);
  if (conf) {
    int rc = load_config(conf, cfg);
    if (rc) return rc;
    if (on_command_line(argc, argv, "listen")) cfg->num_listen = 0;
    if (on_command_line(argc, argv, "pin")) cfg->num_pins = 0;
    optind = 0;
  }
  int rc = parse_args(argc, argv, cfg);
  if (rc) return rc;
  /* Sockets are private unless the operator says who else may connect (not the umask's say). */
  if (cfg->socket_mode == (uint32_t)-1) cfg->socket_mode = cfg->socket_gid != (uint32_t)-1 ? 0660 : 0600;
  /* A str is bounded like a bin, by the message limit: `ir` may come as either, and the
   * payload limit (256 MiB) is the one limit on it (docs/protocol.md). */
  cfg->limits.max_str = (uint32_t)KILN_MIN(cfg->limits.max_message, UINT32_MAX);
  kiln_log_set_process("kilnd");
  s->conn_handler = &conn_handler;
  add_hooks(s);
  raise_nofile();
  /* The readiness fd must not leak into worker processes: the reader waits for its EOF. */
  if (cfg->ready_fd >= 0) fcntl(cfg->ready_fd, F_SETFD, FD_CLOEXEC);

  kiln_status_t st = kiln_crypto_init();
  if (st) {
    fprintf(stderr, "kilnd: %s\n", kiln_status_message(st));
    return 1;
  }
  /* No TCP unless asked for: on loopback without tokens every local user could use it. */
  static char default_unix[300];
  if (cfg->num_listen == 0) {
    snprintf(default_unix, sizeof(default_unix), "unix:");
    st = kiln_default_unix_path(default_unix + 5, sizeof(default_unix) - 5);
    if (st) {
      fprintf(stderr, "kilnd: %s\n", kiln_status_message(st));
      kiln_status_free(st);
      return 1;
    }
    cfg->listen[cfg->num_listen++] = default_unix;
  }

  s->loop = uv_default_loop();
  s->start_ns = kiln_now_ns();
  kiln_map_init(&s->tensors);
  s->methods = kiln_methods(&s->num_methods);
  s->requests_by_method = calloc((size_t)s->num_methods, sizeof(uint64_t));

  st = kiln_peers_init(s);
  if (!st) st = kiln_tenants_init(&s->tenants, cfg->tokens);
  if (!st) st = kiln_workers_identity_init(s);
  if (!st) st = kiln_devices_probe(s);
  if (!st) st = kiln_compile_init(s);
  if (!st) kiln_metrics_set_compiler(kiln_compile_identity(s));
  if (!st) st = kiln_fleet_host_start(s); /* --fleet: the registry (server/fleet_host.c) */
  if (!st) st = kiln_cache_admin_init(s);
  if (!st) st = kiln_listeners_start(s);
  char metrics_url[320] = "";
  if (!st && metrics_spec)
    st = kiln_metrics_start(s, metrics_spec, metrics_url, sizeof(metrics_url));
  if (st) {
    fprintf(stderr, "kilnd: %s\n", kiln_status_message(st));
    KILN_LOG_ERROR("start_failed", "code=%s where=%s", kiln_code_name(kiln_status_code(st)),
                   kiln_status_where(st));
    kiln_status_free(st);
    kiln_compile_shutdown(s); /* compile workers start warm: theirs go (and their folders) */
    kiln_workers_reap_all();
    return 1;
  }

  uv_timer_init(s->loop, &s->sweep_timer);
  s->sweep_timer.data = s;
  uv_timer_start(&s->sweep_timer, on_sweep, 1000, 1000);
  uv_timer_init(s->loop, &s->drain_timer);
  s->drain_timer.data = s;
  uv_signal_init(s->loop, &s->sig_term);
  uv_signal_init(s->loop, &s->sig_int);
  uv_signal_init(s->loop, &s->sig_pipe);
  uv_signal_init(s->loop, &s->sig_hup);
  s->sig_term.data = s->sig_int.data = s->sig_pipe.data = s->sig_hup.data = s;
  uv_signal_start(&s->sig_hup, on_signal, SIGHUP);
  uv_signal_start(&s->sig_term, on_signal, SIGTERM);
  uv_signal_start(&s->sig_int, on_signal, SIGINT);
  uv_signal_start(&s->sig_pipe, on_signal, SIGPIPE);

  /* The log line first: whoever waits on the ready fd may read the log as soon as it closes. */
  KILN_LOG_INFO("ready", "version=%s devices=%u listeners=%d", KILN_VERSION, s->num_devices,
                s->num_listeners);
  /* Readiness: every listener is bound and listening. */
  if (cfg->ready_fd >= 0) {
    char lines[KILN_MAX_LISTENERS * 310 + 330];
    size_t n = 0;
    for (int i = 0; i < s->num_listeners; i++)
      n += (size_t)snprintf(lines + n, sizeof(lines) - n, "%s\n", s->listeners[i].address);
    /* Last, and not a tcp: or unix: line, so readers that look for listeners skip it. */
    if (metrics_url[0]) n += (size_t)snprintf(lines + n, sizeof(lines) - n, "%s\n", metrics_url);
    ssize_t w = write(cfg->ready_fd, lines, n);
    (void)w;
    close(cfg->ready_fd);
  }
#ifdef KILN_HAVE_SYSTEMD
  /* Type=notify: systemd orders dependent units after this, not after the fork. */
  sd_notify(0, "READY=1");
#endif

  uv_run(s->loop, UV_RUN_DEFAULT);
  kiln_workers_reap_all();
  KILN_LOG_INFO("exit", "requests=%llu", (unsigned long long)s->total_requests);
  uv_loop_close(s->loop);
  return 0;
}
