/* The schedule form shows the timing fields of the chosen kind only (rows with errors stay). */
"use strict";
(function () {
    const rows = {
        INTERVAL: ".field-frequency_time",
        CRON: ".field-cron_expression",
        RRULE: ".field-rrule",
    };
    function update(kind) {
        Object.keys(rows).forEach(function (name) {
            document.querySelectorAll(".form-row" + rows[name]).forEach(function (row) {
                row.hidden = name !== kind && !row.classList.contains("errors") &&
                    !row.querySelector(".errorlist");
            });
        });
    }
    function start() {
        const select = document.getElementById("id_schedule_kind");
        if (!select) { return; }
        select.addEventListener("change", function () { update(select.value); });
        update(select.value);
    }
    if (document.readyState === "loading") {
        document.addEventListener("DOMContentLoaded", start);
    } else {
        start();
    }
})();
