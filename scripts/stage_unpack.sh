# Sourced by the device scripts (device_verify.sh, bench_nvjpeg_start.sh, j2k_timeline.sh):
# unpacks a stage made by scripts/stage_gpu_host.sh (or ../shared/tools/device-stage.sh) (bin/dicomflow[.xz], libs/*.xz) and
# replicates its decode-data series.
#
#   unpack FILE DEST        FILE (.xz or plain) to DEST, executable
#   stage_unpack STAGE TAG  the codec libraries into /tmp/TAG-libs (put first on
#                           LD_LIBRARY_PATH) and the binary to /tmp/TAG-bin/dicomflow ($bin)

unpack() {
  case $1 in *.xz) xz -dc "$1" > "$2" ;; *) cp "$1" "$2" ;; esac
  chmod +x "$2"
}

stage_unpack() {
  local stage=$1 tag=$2 f
  mkdir -p "/tmp/$tag-libs" "/tmp/$tag-bin"
  for f in "$stage"/libs/*.xz; do
    [ -e "$f" ] && xz -dc "$f" > "/tmp/$tag-libs/$(basename "$f" .xz)"
  done
  export LD_LIBRARY_PATH=/tmp/$tag-libs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
  bin=/tmp/$tag-bin/dicomflow
  unpack "$(ls "$stage"/bin/dicomflow* | head -1)" "$bin"
}

# replicate SRC COUNT DEST: SRC's files copied into DEST/c1, DEST/c2, … until DEST holds at
# least COUNT (a series of COUNT slices from the stage's few distinct ones); prints how many.
replicate() {
  local src=$1 count=$2 dest=$3 distinct i
  distinct=$(ls "$src" | wc -l)
  for i in $(seq 1 $(( (count + distinct - 1) / distinct ))); do
    mkdir -p "$dest/c$i" && cp "$src"/* "$dest/c$i/"
  done
  find "$dest" -type f | wc -l
}
