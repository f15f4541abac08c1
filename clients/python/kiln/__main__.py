"""python3 -m kiln [--url URL] [--token T] [--autostart] [--version] [--include]

Prints the package's version, where it is installed and the folder of kiln/kernel.h
(``kiln.get_include()``), then checks the connection: it says hello to kilnd ($KILN_URL,
the default socket, or --url) and lists its devices. A private kilnd is started only with
--autostart. Exit status 0 when kilnd answered, 3 when it did not (as the C CLI), 2 for bad
arguments, 1 for an error reply."""

import argparse
import os
import sys


def main(argv=None):
    import kiln
    ap = argparse.ArgumentParser(prog="python3 -m kiln", description=__doc__.splitlines()[2])
    ap.add_argument("--url", default=None, help="kilnd address: unix:PATH, tcp:HOST:PORT, tcp://HOST:PORT, "
                                                "tls:HOST:PORT (default: $KILN_URL, then the default socket)")
    ap.add_argument("--token", default=None, help="tenant token (default: $KILN_TOKEN)")
    ap.add_argument("--autostart", action="store_true", help="start a private CPU kilnd if none answers")
    ap.add_argument("--version", action="store_true", help="print the version and exit")
    ap.add_argument("--include", action="store_true",
                    help="print the folder to pass to the C compiler's -I for kiln/kernel.h and exit")
    args = ap.parse_args(argv)
    if args.version:
        print(kiln.__version__)
        return 0
    if args.include:
        print(kiln.get_include())
        return 0
    print("kiln %s (%s)" % (kiln.__version__, os.path.dirname(os.path.abspath(kiln.__file__))))
    print("include: %s" % kiln.get_include())
    try:
        with kiln.connect(args.url, token=args.token, autostart=args.autostart) as s:
            print("kilnd: %s at %s (protocol %s, tenant %s)" % (s.server or "?", s.url, s.version,
                                                                  s.tenant or "-"))
            for d in s.devices_info():
                if isinstance(d, dict):
                    print("  %-8s %s" % (d.get("id", "?"), d.get("name") or d.get("arch") or ""))
    except kiln.Unavailable as e:
        print("kilnd: not reachable: %s" % e.message, file=sys.stderr)
        return 3
    except kiln.KilnError as e:
        print("kilnd: %s" % e, file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
