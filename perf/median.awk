# median(list): the median of the numbers in a space-separated list (0 when
# empty). Shared by the perf/*.sh summaries: awk "$(cat perf/median.awk) <program>".
function median(list,   n, v, i, j, t) {
  n = split(list, v, " ")
  if (n == 0) return 0
  for (i = 2; i <= n; i++) { t = v[i] + 0; for (j = i - 1; j >= 1 && v[j] + 0 > t; j--) v[j + 1] = v[j]; v[j + 1] = t }
  return n % 2 ? v[(n + 1) / 2] : (v[n / 2] + v[n / 2 + 1]) / 2
}
