#!/bin/sh
# Makes the certificates the TLS tests use, in DIR (made fresh at test time; nothing is kept
# in the repository): a CA, a server certificate for 127.0.0.1 and localhost, a client
# certificate, and a second, unrelated CA with a client and a server certificate of its own.
#   make_pki.sh DIR
set -eu
dir=$1
mkdir -p "$dir"
cd "$dir"
key() { openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out "$1" 2>/dev/null; }
ca() { # NAME CN
  key "$1.key"
  openssl req -x509 -new -key "$1.key" -out "$1.pem" -days 2 -subj "/CN=$2" \
    -addext basicConstraints=critical,CA:TRUE -addext keyUsage=critical,keyCertSign,cRLSign
}
leaf() { # NAME CA CN EXTENSIONS
  key "$1.key"
  openssl req -new -key "$1.key" -out "$1.csr" -subj "/CN=$3"
  printf '%s\n' "$4" > "$1.ext"
  openssl x509 -req -in "$1.csr" -CA "$2.pem" -CAkey "$2.key" -CAcreateserial -out "$1.pem" \
    -days 2 -extfile "$1.ext" 2>/dev/null
  rm -f "$1.csr" "$1.ext"
}
ca ca "kiln test CA"
ca other-ca "another CA"
leaf server ca localhost "subjectAltName=IP:127.0.0.1,DNS:localhost
extendedKeyUsage=serverAuth"
leaf client ca "kiln test client" "extendedKeyUsage=clientAuth"
leaf other-client other-ca "stranger" "extendedKeyUsage=clientAuth"
leaf other-server other-ca localhost "subjectAltName=IP:127.0.0.1,DNS:localhost
extendedKeyUsage=serverAuth"
