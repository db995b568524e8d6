vcl 4.1;
# Varnish with the cookie- and query-normalizing VCL its users commonly
# deploy (hack/bench.sh, part 9). The rules are the usual ones of the
# public templates and docs, written here for this site:
# - tracking parameters (utm_*, gclid, fbclid, ...) stripped and the
#   query sorted with std.querysort: as in the widely copied
#   varnish-4.x/5.x/6.0 configuration templates' default.vcl (Mattias
#   Geniar) and hosting guides' recipes ("Strip marketing or analytics
#   query parameters with Varnish", GetPageSpeed; "Varnish 103: URL
#   normalization", Upsun);
# - static files served without cookies (unset req.http.Cookie for asset
#   extensions): the same templates;
# - every cookie but the application's session cookie removed, the
#   "Cookies" advice of varnish-cache.org's users guide ("Achieving a high
#   hitrate"), written with vmod_cookie's keep() as its documentation
#   shows, so analytics cookies no longer make builtin.vcl pass the
#   request; a request that still has a Cookie (the session) is passed
#   by builtin.vcl.
# Accept-Encoding needs no rule: http_gzip_support (on by default) makes
# Varnish ask the origin for gzip and store one gzipped copy.
# hack/bench.sh fills in the origin's address.
import std;
import cookie;

backend default {
  .host = "__ORIGIN_HOST__";
  .port = "__ORIGIN_PORT__";
}

sub vcl_recv {
  # The port is not part of the site.
  set req.http.Host = regsub(req.http.Host, ":[0-9]+$", "");

  # Tracking parameters out of the URL, then the query sorted.
  if (req.url ~ "(\?|&)(utm_[a-z]+|gclid|gclsrc|dclid|fbclid|msclkid|mc_cid|mc_eid|_ga|_gl)=") {
    set req.url = regsuball(req.url, "&(utm_[a-z]+|gclid|gclsrc|dclid|fbclid|msclkid|mc_cid|mc_eid|_ga|_gl)=([^&]*)", "");
    set req.url = regsuball(req.url, "\?(utm_[a-z]+|gclid|gclsrc|dclid|fbclid|msclkid|mc_cid|mc_eid|_ga|_gl)=([^&]*)", "?");
    set req.url = regsub(req.url, "\?&", "?");
    set req.url = regsub(req.url, "\?$", "");
  }
  set req.url = std.querysort(req.url);

  # Static files are the same for everyone: no cookies.
  if (req.url ~ "^[^?]*\.(css|js|mjs|jpg|jpeg|png|gif|webp|avif|svg|ico|woff2?)(\?.*)?$") {
    unset req.http.Cookie;
    return (hash);
  }

  # Only the session cookie matters to the application.
  if (req.http.Cookie) {
    cookie.parse(req.http.Cookie);
    cookie.keep("sid");
    set req.http.Cookie = cookie.get_string();
    if (req.http.Cookie == "") {
      unset req.http.Cookie;
    }
  }
  # builtin.vcl goes on: a Cookie left (signed in) or Authorization: pass.
}

sub vcl_deliver {
  if (obj.hits > 0) {
    set resp.http.X-Cache = "HIT";
  } else {
    set resp.http.X-Cache = "MISS";
  }
}
