// uagate console: shows the times the server writes in UTC (<time datetime="…Z">) in the
// browser's time zone, keeping UTC in their title, and names that zone (.tz-name). Forms marked
// data-local-times send the zone offset of their datetime-local inputs as `tz`. Without
// JavaScript the pages read in UTC.
(function () {
  "use strict";
  function pad(n) {
    return String(n).padStart(2, "0");
  }
  function local(d, seconds) {
    var s = d.getFullYear() + "-" + pad(d.getMonth() + 1) + "-" + pad(d.getDate()) + " " +
      pad(d.getHours()) + ":" + pad(d.getMinutes());
    return seconds ? s + ":" + pad(d.getSeconds()) : s;
  }
  function zone() {
    try {
      return Intl.DateTimeFormat().resolvedOptions().timeZone || "local time";
    } catch (e) {
      return "local time";
    }
  }
  function rewrite(root) {
    root.querySelectorAll("time[datetime]").forEach(function (t) {
      var d = new Date(t.getAttribute("datetime"));
      if (isNaN(d.getTime())) return;
      t.textContent = local(d, t.getAttribute("data-precision") !== "minute");
    });
    root.querySelectorAll(".tz-name").forEach(function (s) {
      s.textContent = zone();
    });
  }
  // The offset at the first time entered (a range across a DST change is off by that hour at
  // its other end), else now.
  function sendZone(form) {
    form.addEventListener("submit", function () {
      var tz = form.querySelector("input[name=tz]");
      if (!tz) return;
      var at = new Date();
      var inputs = form.querySelectorAll("input[type=datetime-local]");
      for (var i = 0; i < inputs.length; i++) {
        var d = new Date(inputs[i].value);
        if (inputs[i].value && !isNaN(d.getTime())) {
          at = d;
          break;
        }
      }
      tz.value = String(-at.getTimezoneOffset());
    });
  }
  document.addEventListener("DOMContentLoaded", function () {
    rewrite(document);
    document.querySelectorAll("form[data-local-times]").forEach(sendZone);
  });
  document.addEventListener("htmx:afterSwap", function (e) {
    rewrite(e.target);
  });
})();
