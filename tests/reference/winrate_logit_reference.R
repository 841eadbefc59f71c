# Regenerates winrate_logit_reference.csv: the logit-scale interval of a clustered mean from R's
# survey package, svyciprop(method = "logit"), which fits svyglm(y ~ 1, quasibinomial) with the
# linearisation (sandwich) variance and df = degf(design) = G - 1, and maps the Wald t interval
# back by expit. On balanced clusters this variance equals CR2's and CR2's Bell-McCaffrey df is
# G - 1, so honestci's cr2_logit must agree. R 4.2.2, survey 4.1-1 (Debian r-cran-survey).
# Run from this folder: Rscript winrate_logit_reference.R
suppressMessages(library(survey))

rows <- function(analysis, data) {
  design <- svydesign(ids = ~cluster, data = data)
  do.call(rbind, lapply(c(0.95, 0.90), function(level) {
    ci <- svyciprop(~y, design, method = "logit", level = level)
    data.frame(analysis = analysis, level = level, estimate = as.numeric(ci),
               ci_lower = attr(ci, "ci")[[1]], ci_upper = attr(ci, "ci")[[2]],
               n_obs = nrow(data), n_clusters = length(unique(data$cluster)))
  }))
}

# (d) 10 clusters x 20 binary scores.
d <- read.csv("input_balanced_icc.csv")
# (a) the win-rate design, scores in {0, 1/2, 1}, made balanced: the first 236 verdicts of each
# of its 6 vignettes (the smallest vignette has 236).
a <- read.csv("input_winrate_order.csv")
a$cluster <- a$vignette
a <- do.call(rbind, lapply(split(a, a$cluster), function(g) head(g, 236)))

out <- rbind(rows("balanced_icc", d), rows("winrate_order_balanced", a))
write.csv(out, "winrate_logit_reference.csv", row.names = FALSE)
print(out, digits = 15)
