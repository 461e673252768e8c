#!/usr/bin/env bash
# The line budget (a project rule: files under 500 lines): fails, listing them, when a
# tracked non-test source file has more than 500 lines. Exempt: tests (files under a tests/
# folder, and files named tests.rs or *_tests.rs, which hold only #[cfg(test)] code) and
# generated files (marked "@generated", or lockfiles).
set -euo pipefail
cd "$(dirname "$0")/../.."
LIMIT=500
over=()
while IFS= read -r file; do
  case "$file" in
    */tests/* | tests/* | *tests.rs | *_tests.rs | *.lock) continue ;;
  esac
  [ -f "$file" ] || continue
  if grep -q "@generated" <<< "$(head -5 "$file")"; then continue; fi
  lines=$(wc -l < "$file")
  if [ "$lines" -gt "$LIMIT" ]; then over+=("$lines $file"); fi
done < <(git ls-files --cached --others --exclude-standard -- \
  '*.rs' '*.cu' '*.cuh' '*.cpp' '*.h' '*.py' '*.sh')
if [ "${#over[@]}" -gt 0 ]; then
  echo "line budget: these non-test source files have more than $LIMIT lines:" >&2
  printf '  %s\n' "${over[@]}" >&2
  exit 1
fi
echo "line budget: every non-test source file has at most $LIMIT lines"
