# bash completion of kiln (installed as share/bash-completion/completions/kiln). Commands, their
# subcommands and their options come from `kiln --complete`, which prints the CLI's own command
# table: a line per command, its name, its subcommands (words without a dash), its options.
_kiln() {
  local cur=${COMP_WORDS[COMP_CWORD]} cmd="" table i words=0
  table=$("${COMP_WORDS[0]}" --complete 2>/dev/null) || return 0
  for ((i = 1; i < COMP_CWORD; i++)); do
    case ${COMP_WORDS[i]} in -*) continue ;; esac
    if [ -n "$cmd" ]; then words=$((words + 1)); continue; fi
    if grep -q "^${COMP_WORDS[i]}\( \|\$\)" <<<"$table"; then cmd=${COMP_WORDS[i]}; fi
  done
  if [[ $cur == -* ]]; then
    local opts="--url --tls-ca --tls-cert --tls-key --timeout --token --help --version"
    [ -n "$cmd" ] && opts=$(grep "^$cmd " <<<"$table" | tr ' ' '\n' | grep -- '^-')
    mapfile -t COMPREPLY < <(compgen -W "$opts" -- "$cur")
  elif [ -z "$cmd" ]; then
    mapfile -t COMPREPLY < <(compgen -W "$(cut -d' ' -f1 <<<"$table")" -- "$cur")
  else
    local subs
    subs=$(grep "^$cmd " <<<"$table" | tr ' ' '\n' | tail -n +2 | grep -v -- '^-')
    if [ -n "$subs" ] && [ "$words" -eq 0 ]; then
      mapfile -t COMPREPLY < <(compgen -W "$subs" -- "$cur")
    else
      mapfile -t COMPREPLY < <(compgen -f -- "$cur")
    fi
  fi
}
complete -F _kiln kiln
