"""The audit core, in floors; each imports only from the floors below it.

======================  ===========================================================================
floor                   what it holds
======================  ===========================================================================
``errors``              domain exceptions (what, why, what to do); importable from every floor
``policy``              verdict ladder, thresholds, gate names, the interval each population's gate
                        reads, the default seed, exit codes: the auditor's rules on one page
``data``                table schema, loaders, claims, both-order contests
``stats``               pure estimators on arrays and frames returning frozen results
``checks``              calibration, position bias, selection, leakage, claimed figures, training
                        health: each a function of the audit context returning a frozen result
``gates``               every gate rule and the one registry, reading check results
``pipeline``            the audit as a function: claim + policy + data → report model
``cli``                 every command (judges and training commands are wired here too)
======================  ===========================================================================

``honestci.audit.report_model`` is the report model the renderers in ``reports`` read.
"""
