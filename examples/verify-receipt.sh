#!/bin/sh
# Checks the signature of a receipt from announce/<device>/receipts (docs/fleet.md): prints "ok" and exits 0 if
# it was signed with the device key KEY_HEX (the one its "kid" names), else says so and exits 1.
#
#   verify-receipt.sh KEY_HEX < receipt.json
#
# Needs jq and openssl. The canonical text is the receipt's fields, one per line in this order, a missing field
# written with nothing after "=", no final line break; "kind", "clips" (a corpus push's receipt) and "heard" (a repeat's) have a line
# only when the receipt has them.
set -eu
key_hex="$1"
receipt=$(cat)
canonical=$(printf '%s' "$receipt" | jq -j '"announce-receipt/\(.v)\n" + (if .kind then "kind=\(.kind)\n" else "" end) + "device=\(.device)\nkid=\(.kid)\norder=\(.order)\nstate=\(.state)\noriginal=\(.original // "")\njob=\(.job // "")\naccepted_at=\(.accepted_at // "")\nheard_at=\(.heard_at // "")\nfirst_sample_us=\(.first_sample_us // "")\nerror=\(.error // "")\n" + (if .clips != null then "clips=\(.clips)\n" else "" end) + (if .heard != null then "heard=\(.heard)\n" else "" end) + "created_at=\(.created_at)"')
expected=$(printf '%s' "$canonical" | openssl dgst -sha256 -mac HMAC -macopt "hexkey:$key_hex" -r | cut -c1-64)
if [ "$expected" = "$(printf '%s' "$receipt" | jq -r .sig)" ]; then
    echo ok
else
    echo "bad signature" >&2
    exit 1
fi
