# Regenerates cluster_robust_reference.csv and icc_reference.csv from the committed input_*.csv
# (written by make_inputs.py). R 4.2.2, clubSandwich 0.5.8, lme4 (Debian r-cran-clubsandwich,
# r-cran-lme4). Run from this folder: Rscript cluster_robust_reference.R
suppressMessages({
  library(clubSandwich)
  library(lme4)
})

types <- c("CR0", "CR1", "CR1S", "CR2")

coef_rows <- function(analysis, fit, cluster) {
  do.call(rbind, lapply(types, function(type) {
    ct <- coef_test(fit, vcov = type, cluster = cluster, test = "Satterthwaite")
    ci <- conf_int(fit, vcov = type, cluster = cluster, test = "Satterthwaite", level = 0.95)
    data.frame(analysis = analysis, vcov = type, coef = ct$Coef, estimate = ct$beta, SE = ct$SE,
               t = ct$tstat, df_Satt = ct$df_Satt, p_Satt = ct$p_Satt,
               ci_lower = ci$CI_L, ci_upper = ci$CI_U,
               n_obs = nobs(fit), n_clusters = length(unique(cluster)))
  }))
}

contrast_rows <- function(analysis, fit, cluster, contrasts) {
  do.call(rbind, lapply(types, function(type) {
    lc <- linear_contrast(fit, vcov = type, cluster = cluster, contrasts = contrasts,
                          test = "Satterthwaite", level = 0.95, p_values = TRUE)
    data.frame(analysis = analysis, vcov = type, coef = lc$Coef, estimate = lc$Est, SE = lc$SE,
               t = lc$Est / lc$SE, df_Satt = lc$df, p_Satt = lc$p_val,
               ci_lower = lc$CI_L, ci_upper = lc$CI_U,
               n_obs = nobs(fit), n_clusters = length(unique(cluster)))
  }))
}

# (a) win-rate design with an order covariate: lm(y ~ order), both coefficients, and the
# win rate in each presentation order as contrasts.
a <- read.csv("input_winrate_order.csv")
fit_a <- lm(y ~ order, data = a)
order_contrasts <- rbind(policy_first = c(1, 0.5), policy_second = c(1, -0.5))

# (b) paired difference of two systems on the same items: lm(diff ~ 1), and the stacked form
# lm(y ~ system) with the system coefficient (b minus a).
b <- read.csv("input_paired_systems.csv")
b$diff <- b$score_a - b$score_b
fit_b_diff <- lm(diff ~ 1, data = b)
stacked <- rbind(data.frame(vignette = b$vignette, system = "a", y = b$score_a),
                 data.frame(vignette = b$vignette, system = "b", y = b$score_b))
fit_b_stacked <- lm(y ~ system, data = stacked)

# (c) unequal cluster sizes (G = 12, sizes 5..80) with two covariates, plus a contrast.
cc <- read.csv("input_unequal_clusters.csv")
fit_c <- lm(y ~ x + z, data = cc)
xz_contrast <- rbind(x_minus_z = c(0, 1, -1))
# (c') the same data with a dummy for cluster 0: that cluster has full leverage on the dummy,
# so I - H_gg is singular and CR2 uses the generalised inverse square root.
cc$first <- as.numeric(cc$cluster == 0)
fit_c_dummy <- lm(y ~ x + first, data = cc)

out <- rbind(
  coef_rows("winrate_order", fit_a, a$vignette),
  contrast_rows("winrate_order_contrast", fit_a, a$vignette, order_contrasts),
  coef_rows("paired_diff", fit_b_diff, b$vignette),
  coef_rows("paired_stacked", fit_b_stacked, stacked$vignette),
  coef_rows("unequal_clusters", fit_c, cc$cluster),
  contrast_rows("unequal_clusters_contrast", fit_c, cc$cluster, xz_contrast),
  coef_rows("cluster_dummy", fit_c_dummy, cc$cluster)
)
write.csv(out, "cluster_robust_reference.csv", row.names = FALSE)

# ICC: (d) balanced, REML random-intercept fit (equals the one-way ANOVA estimator when
# positive); (c) unbalanced, the ANOVA estimator from aov's mean squares with
# n0 = (N - sum(n_g^2)/N)/(G - 1).
d <- read.csv("input_balanced_icc.csv")
vc <- as.data.frame(VarCorr(lmer(y ~ 1 + (1 | cluster), data = d, REML = TRUE)))
icc_reml <- vc$vcov[vc$grp == "cluster"] / sum(vc$vcov)

anova_icc <- function(y, g) {
  g <- factor(g)
  ms <- summary(aov(y ~ g))[[1]][["Mean Sq"]]
  sizes <- as.vector(table(g))
  N <- length(y)
  n0 <- (N - sum(sizes^2) / N) / (nlevels(g) - 1)
  max(0, (ms[1] - ms[2]) / (ms[1] + (n0 - 1) * ms[2]))
}
icc_out <- data.frame(
  analysis = c("balanced_icc", "balanced_icc", "unequal_clusters"),
  method = c("lmer_reml", "aov_anova", "aov_anova"),
  icc = c(icc_reml, anova_icc(d$y, d$cluster), anova_icc(cc$y, cc$cluster))
)
write.csv(icc_out, "icc_reference.csv", row.names = FALSE)
