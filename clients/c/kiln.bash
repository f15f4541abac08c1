# bash completion of kiln (installed as share/bash-completion/completions/kiln). Commands and
# their options come from `kiln --complete`, which prints the CLI's own command table.
_kiln() {
  local cur=${COMP_WORDS[COMP_CWORD]} cmd="" table i
  table=$("${COMP_WORDS[0]}" --complete 2>/dev/null) || return 0
  for ((i = 1; i < COMP_CWORD; i++)); do
    case ${COMP_WORDS[i]} in -*) continue ;; esac
    if grep -q "^${COMP_WORDS[i]}\( \|\$\)" <<<"$table"; then cmd=${COMP_WORDS[i]}; break; fi
  done
  if [[ $cur == -* ]]; then
    local opts="--url --tls-ca --tls-cert --tls-key --timeout --token --help --version"
    [ -n "$cmd" ] && opts=$(grep "^$cmd " <<<"$table" | cut -d' ' -f2-)
    mapfile -t COMPREPLY < <(compgen -W "$opts" -- "$cur")
  elif [ -z "$cmd" ]; then
    mapfile -t COMPREPLY < <(compgen -W "$(cut -d' ' -f1 <<<"$table")" -- "$cur")
  else
    mapfile -t COMPREPLY < <(compgen -f -- "$cur")
  fi
}
complete -F _kiln kiln
