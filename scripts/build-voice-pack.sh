#!/usr/bin/env bash
# Builds a default voice pack offline from espeak-ng: one clip per token, resampled to the pack rate,
# leading/trailing silence trimmed, peak-normalised, plus a manifest.json (docs/voice-packs.md).
# Reproducible: same espeak-ng, same sox, same recipe → the same bytes (sox runs without dither).
#
#   scripts/build-voice-pack.sh --lang zh|en --out DIR [--rate HZ]
#
# Facts behind the choices (../shared/VOICE.md): the `cmn`/`zh` voices are broken on Debian 12's
# espeak-ng 1.51; `cmn-latn-pinyin` reads every character right and also reads pinyin with tone
# numbers (used for the tone-sandhi variants of 一). The female variant with a wide pitch range makes
# the tones audible. Clips are normalised to -3 dBFS because some synthesise at 0 dBFS.
set -euo pipefail

lang=""
out=""
rate=16000
while (($#)); do
    case "$1" in
        --lang) lang="$2"; shift 2 ;;
        --out) out="$2"; shift 2 ;;
        --rate) rate="$2"; shift 2 ;;
        *) echo "build-voice-pack: unknown argument $1" >&2; exit 64 ;;
    esac
done
[[ -n "$lang" && -n "$out" ]] || { echo "usage: $0 --lang zh|en --out DIR [--rate HZ]" >&2; exit 64; }

# Each clip: token|file stem|text given to espeak-ng.
case "$lang" in
zh)
    voice="cmn-latn-pinyin+f3"
    speed=190
    gap_ms=20
    separator=""
    pack_name="zh-espeak"
    clips=(
        "零|ling|零" "一|yi1|一" "二|er|二" "两|liang|两" "三|san|三" "四|si|四" "五|wu|五"
        "六|liu|六" "七|qi|七" "八|ba|八" "九|jiu|九" "十|shi|十" "百|bai|百" "千|qian|千"
        "万|wan|万" "亿|yi4-billion|亿" "点|dian|点" "元|yuan|元" "角|jiao|角" "分|fen|分"
        "到账|daozhang|到账" "收款|shoukuan|收款" "支付宝到账|alipay|支付宝到账" "微信收款|wechat|微信收款"
        "云闪付到账|unionpay|云闪付到账" "退款|tuikuan|退款" "支付宝退款|alipay-refund|支付宝退款"
        "微信退款|wechat-refund|微信退款" "云闪付退款|unionpay-refund|云闪付退款"
        "网络已断开|network-lost|网络已断开" "网络已恢复|network-restored|网络已恢复"
        "服务器已连接|server-connected|服务器已连接" "服务器已断开|server-disconnected|服务器已断开"
        "电量低，请充电|low-battery|电量低，请充电" "正在充电|charging|正在充电"
        "已静音|muted|已静音" "已取消静音|unmuted|已取消静音"
        "音量|volume|音量" "最大|maximum|最大" "最小|minimum|最小"
        "今日收款|today-payments|今日收款" "笔，共|bi-gong|笔，共" "今日暂无收款|today-none|今日暂无收款"
        # Notices: prompts of their own names below, which a combination broadcast may name too
        # (announce-ctl combine new-order '{#0423}').
        "您有新的外卖订单，请及时处理|new-order|您有新的外卖订单，请及时处理" "有用户催单啦|order-urged|有用户催单啦"
        "有用户取消订单|order-cancelled|有用户取消订单" "有用户申请退款|refund-requested|有用户申请退款"
        "会员卡支付|member-card|会员卡支付" "已使用优惠券|coupon-used|已使用优惠券"
        "祝您生活愉快|have-a-nice-day|祝您生活愉快"
    )
    # Tone sandhi: 一 is yì before 百/千 and yí before 万/亿 (pinyin input, read by the same voice).
    variant_clips=("一|yi4|yi4" "一|yi2|yi2")
    variants='[{"token":"一","before":["百","千"],"file":"clips/yi4.wav"},
               {"token":"一","before":["万","亿"],"file":"clips/yi2.wav"}]'
    templates='{
        "plain": ["到账","{amount}"], "alipay": ["支付宝到账","{amount}"],
        "wechat": ["微信收款","{amount}"], "unionpay": ["云闪付到账","{amount}"],
        "collect": ["收款","{amount}"], "collect.refund": ["退款","{amount}"],
        "plain.refund": ["退款","{amount}"], "alipay.refund": ["支付宝退款","{amount}"],
        "wechat.refund": ["微信退款","{amount}"], "unionpay.refund": ["云闪付退款","{amount}"]
    }'
    prompts='{
        "network-lost": ["网络已断开"], "network-restored": ["网络已恢复"],
        "server-connected": ["服务器已连接"], "server-disconnected": ["服务器已断开"],
        "low-battery": ["电量低，请充电"], "charging": ["正在充电"],
        "muted": ["已静音"], "unmuted": ["已取消静音"],
        "volume-max": ["音量","最大"], "volume-min": ["音量","最小"],
        "new-order": ["您有新的外卖订单，请及时处理"], "order-urged": ["有用户催单啦"],
        "order-cancelled": ["有用户取消订单"], "refund-requested": ["有用户申请退款"],
        "member-card": ["会员卡支付"], "coupon-used": ["已使用优惠券"], "have-a-nice-day": ["祝您生活愉快"]
    }'
    # The day's total (announce-ctl today --say): 今日收款三笔，共一千二百三十四点五元; refunds after it. The count
    # and the sum are read by the amount reader, with the digit clips.
    summary='{
        "payments": ["今日收款","{count}","笔，共","{amount}"], "refunds": ["退款","{count}","笔，共","{amount}"],
        "none": ["今日暂无收款"]
    }'
    # Volume levels 1-10 reuse the digit clips: 音量五.
    levels=(一 二 三 四 五 六 七 八 九 十)
    for level in {1..10}; do
        prompts=$(jq -c --arg n "volume-$level" --arg d "${levels[level-1]}" '. + {($n): ["音量", $d]}' <<<"$prompts")
    done
    currency='null'
    ;;
en)
    voice="en-us+f3"
    speed=175
    gap_ms=30
    separator=" "
    pack_name="en-espeak"
    clips=()
    for word in zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen \
        fifteen sixteen seventeen eighteen nineteen twenty thirty forty fifty sixty seventy eighty ninety \
        hundred thousand million billion and point yuan fen; do
        clips+=("$word|$word|$word")
    done
    clips+=(
        "payment received|received|payment received" "alipay payment received|alipay|alipay payment received"
        "wechat pay payment received|wechat|wechat pay payment received"
        "union pay payment received|unionpay|union pay payment received"
        "refund|refund|refund" "alipay refund|alipay-refund|alipay refund"
        "wechat pay refund|wechat-refund|wechat pay refund" "union pay refund|unionpay-refund|union pay refund"
        "network disconnected|network-lost|network disconnected"
        "network restored|network-restored|network restored"
        "server connected|server-connected|server connected"
        "server disconnected|server-disconnected|server disconnected"
        "battery low, please charge|low-battery|battery low, please charge" "charging|charging|charging"
        "muted|muted|muted" "unmuted|unmuted|unmuted"
        "volume|volume|volume" "maximum|maximum|maximum" "minimum|minimum|minimum"
        "payments today|payments-today|payments today" "total|total|total" "refunds|refunds|refunds"
        "no payments today|today-none|no payments today"
        # Notices: prompts of the same names as the zh pack's.
        "you have a new takeout order, please see to it|new-order|you have a new takeout order, please see to it"
        "a customer is asking after their order|order-urged|a customer is asking after their order"
        "a customer has cancelled an order|order-cancelled|a customer has cancelled an order"
        "a customer has asked for a refund|refund-requested|a customer has asked for a refund"
        "member card payment|member-card|member card payment" "coupon used|coupon-used|coupon used"
        "have a nice day|have-a-nice-day|have a nice day"
    )
    variant_clips=()
    variants='null'
    templates='{
        "plain": ["payment received","{amount}"], "alipay": ["alipay payment received","{amount}"],
        "wechat": ["wechat pay payment received","{amount}"], "unionpay": ["union pay payment received","{amount}"],
        "collect": ["payment received","{amount}"], "collect.refund": ["refund","{amount}"],
        "plain.refund": ["refund","{amount}"], "alipay.refund": ["alipay refund","{amount}"],
        "wechat.refund": ["wechat pay refund","{amount}"], "unionpay.refund": ["union pay refund","{amount}"]
    }'
    prompts='{
        "network-lost": ["network disconnected"], "network-restored": ["network restored"],
        "server-connected": ["server connected"], "server-disconnected": ["server disconnected"],
        "low-battery": ["battery low, please charge"], "charging": ["charging"],
        "muted": ["muted"], "unmuted": ["unmuted"],
        "volume-max": ["volume","maximum"], "volume-min": ["volume","minimum"],
        "new-order": ["you have a new takeout order, please see to it"],
        "order-urged": ["a customer is asking after their order"],
        "order-cancelled": ["a customer has cancelled an order"],
        "refund-requested": ["a customer has asked for a refund"],
        "member-card": ["member card payment"], "coupon-used": ["coupon used"], "have-a-nice-day": ["have a nice day"]
    }'
    summary='{
        "payments": ["payments today","{count}","total","{amount}"], "refunds": ["refunds","{count}","total","{amount}"],
        "none": ["no payments today"]
    }'
    levels=(one two three four five six seven eight nine ten)
    for level in {1..10}; do
        prompts=$(jq -c --arg n "volume-$level" --arg d "${levels[level-1]}" '. + {($n): ["volume", $d]}' <<<"$prompts")
    done
    currency='{"major":"yuan","majorPlural":"yuan","minor":"fen","minorPlural":"fen"}'
    ;;
*) echo "build-voice-pack: no recipe for language \"$lang\" (zh, en)" >&2; exit 64 ;;
esac

for tool in espeak-ng sox jq; do
    command -v "$tool" >/dev/null || { echo "build-voice-pack: $tool is missing (run scripts/setup.sh)" >&2; exit 1; }
done

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
stage="$tmp/pack"
mkdir -p "$stage/clips"

# synth STEM TEXT: espeak-ng → trimmed, normalised clip at the pack rate.
synth() {
    local stem="$1" text="$2"
    espeak-ng -v "$voice" -s "$speed" -m -w "$tmp/raw.wav" \
        "<speak><prosody range=\"x-high\">$text</prosody></speak>"
    # Trim leading silence, then the tail by reversing (a fade after an unknown-length trim fails in sox),
    # normalise the peak, convert to 16-bit mono at the pack rate. -D: no dither, so builds are reproducible.
    sox -D "$tmp/raw.wav" -r "$rate" -c 1 -b 16 "$stage/clips/$stem.wav" \
        silence 1 0.005 1% reverse silence 1 0.005 1% reverse norm -3
}

clip_map='{}'
for entry in "${clips[@]}"; do
    IFS='|' read -r token stem text <<<"$entry"
    synth "$stem" "$text"
    clip_map=$(jq -c --arg t "$token" --arg f "clips/$stem.wav" '. + {($t): $f}' <<<"$clip_map")
done
for entry in ${variant_clips[@]+"${variant_clips[@]}"}; do
    IFS='|' read -r _ stem text <<<"$entry"
    synth "$stem" "$text"
done

# The fallback chime: two soft sine tones (played when speech cannot be built).
sox -D -n -r "$rate" -c 1 -b 16 "$stage/clips/chime.wav" \
    synth 0.18 sine 880 synth 0.18 sine 660 : synth 0.30 sine 660 fade h 0.01 0.30 0.2 gain -9 2>/dev/null ||
    sox -D -n -r "$rate" -c 1 -b 16 "$stage/clips/chime.wav" synth 0.4 sine 880 fade h 0.01 0.4 0.25 gain -9

jq -n --argjson clips "$clip_map" --argjson variants "$variants" --argjson templates "$templates" \
    --argjson prompts "$prompts" --argjson currency "$currency" --argjson summary "$summary" \
    --arg name "$pack_name" --arg lang "$lang" --argjson rate "$rate" --argjson gap "$gap_ms" \
    --arg separator "$separator" \
    --arg source "espeak-ng $(espeak-ng --version | awk '{print $4}') voice $voice speed $speed; sox $(sox --version | awk '{print $NF}')" \
    --arg voice "$voice" --argjson speed "$speed" \
    '{format: 1, name: $name, language: $lang, sampleRate: $rate, gapMs: $gap, separator: $separator,
      clips: $clips, templates: $templates, prompts: $prompts, summary: $summary, chime: "clips/chime.wav",
      source: $source,
      speech: {voice: $voice, speed: $speed, pitchRange: "x-high"}}
     + (if $variants == null then {} else {variants: $variants} end)
     + (if $currency == null then {} else {currency: $currency} end)' > "$stage/manifest.json"

rm -rf "$out"
mkdir -p "$(dirname "$out")"
cp -r "$stage" "$out"
echo "build-voice-pack: $lang → $out ($(ls "$out/clips" | wc -l) clips, $(du -sh "$out" | cut -f1))"
