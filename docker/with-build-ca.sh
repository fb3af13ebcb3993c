#!/bin/sh
# Run one build step trusting an extra CA bundle, given as the BuildKit secret `osl_ca`.
#
# Some networks reach the package registries only through a TLS-inspecting proxy whose CA the
# host trusts. The build gets the host's bundle as a secret (docker-compose.yml: secrets.osl_ca),
# so nothing of it lands in an image layer; an empty secret (the default) changes nothing.
#   with-build-ca.sh pip install ...     (pip, Go and Python use SSL_CERT_FILE/PIP_CERT;
#   with-build-ca.sh java -jar ivy.jar   Java gets a temporary trust store with the extra CAs)
set -eu
CA=/run/secrets/osl_ca
if [ ! -s "$CA" ]; then
  exec "$@"
fi
export SSL_CERT_FILE="$CA" PIP_CERT="$CA" REQUESTS_CA_BUNDLE="$CA" CURL_CA_BUNDLE="$CA" GIT_SSL_CAINFO="$CA"
store=""
if command -v keytool >/dev/null 2>&1 && [ -n "${JAVA_HOME:-}" ]; then
  # Java reads no PEM bundle: copy its trust store and add the certificates the image's own
  # Debian bundle lacks (usually one or two, so keytool runs a few times, not a hundred).
  work=$(mktemp -d)
  store="$work/trust.p12"
  cp "$JAVA_HOME/lib/security/cacerts" "$store"
  awk -v dir="$work" '/BEGIN CERTIFICATE/ {n++; f=sprintf("%s/c%04d.pem", dir, n)} f {print > f} /END CERTIFICATE/ {close(f); f=""}' "$CA"
  for cert in "$work"/c*.pem; do
    body=$(grep -v -- '-----' "$cert" | tr -d '\n')
    if ! tr -d '\n' </etc/ssl/certs/ca-certificates.crt | grep -qF "$body"; then
      keytool -importcert -noprompt -storetype PKCS12 -keystore "$store" -storepass changeit \
        -alias "osl-extra-$(basename "$cert" .pem)" -file "$cert" >/dev/null 2>&1 || true
    fi
  done
  export JAVA_TOOL_OPTIONS="${JAVA_TOOL_OPTIONS:-} -Djavax.net.ssl.trustStore=$store -Djavax.net.ssl.trustStoreType=PKCS12 -Djavax.net.ssl.trustStorePassword=changeit"
fi
set +e
"$@"
rc=$?
[ -n "$store" ] && rm -rf "$(dirname "$store")"
exit $rc
