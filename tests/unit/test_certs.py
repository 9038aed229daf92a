"""The webhook's certificates (sj_operator.certs): made, kept while good, renewed in time, CAs overlapping.

Time is passed in; each case moves it by days without waiting. Chains are checked with the
``cryptography`` verifier, as a TLS client (the API server) would check them.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from cryptography import x509
from cryptography.x509.verification import PolicyBuilder, Store

from sj_operator.certs import (
    CA_VALIDITY,
    RENEW_CA_BEFORE,
    RENEW_SERVING_BEFORE,
    SERVING_VALIDITY,
    TLSBundle,
    issue,
    new_ca,
    not_after,
    renew,
    renewal_due,
)

T0 = datetime(2026, 11, 23, 12, 0, tzinfo=UTC)
DAY = timedelta(days=1)
HOSTS = ["scavenger-webhook.scavenger-system.svc", "scavenger-webhook.scavenger-system"]


def verifies(bundle: TLSBundle, host: str, at: datetime) -> bool:
    """Whether a client trusting ``bundle.ca_bundle`` accepts ``bundle.cert`` for ``host`` at ``at``."""
    store = Store(x509.load_pem_x509_certificates(bundle.ca_bundle))
    try:
        subject: x509.DNSName | x509.IPAddress
        import ipaddress
        try:
            subject = x509.IPAddress(ipaddress.ip_address(host))
        except ValueError:
            subject = x509.DNSName(host)
        verifier = PolicyBuilder().store(store).time(at).build_server_verifier(subject)
        verifier.verify(x509.load_pem_x509_certificate(bundle.cert), [])
        return True
    except Exception:
        return False


def test_a_new_bundle_serves_every_host_and_is_trusted() -> None:
    bundle = renew(None, HOSTS, T0)
    assert all(verifies(bundle, host, T0) for host in HOSTS)
    assert not verifies(bundle, "other.example", T0)
    assert not_after(bundle.cert) == (T0 + SERVING_VALIDITY).replace(microsecond=0)


def test_an_address_is_an_ip_subject_alternative_name() -> None:
    bundle = renew(None, ["127.0.0.1"], T0)
    assert verifies(bundle, "127.0.0.1", T0)


def test_a_good_bundle_is_kept_as_it_is() -> None:
    bundle = renew(None, HOSTS, T0)
    assert not renewal_due(bundle, HOSTS, T0 + 10 * DAY)
    assert renew(bundle, HOSTS, T0 + 10 * DAY) is bundle


@pytest.mark.parametrize(("days", "due"), [
    ((SERVING_VALIDITY - RENEW_SERVING_BEFORE).days - 1, False),
    ((SERVING_VALIDITY - RENEW_SERVING_BEFORE).days + 1, True),
])
def test_the_serving_certificate_is_renewed_a_month_before_it_ends(days: int, due: bool) -> None:
    bundle = renew(None, HOSTS, T0)
    assert renewal_due(bundle, HOSTS, T0 + days * DAY) is due


def test_renewing_the_serving_certificate_keeps_the_ca() -> None:
    bundle = renew(None, HOSTS, T0)
    later = T0 + (SERVING_VALIDITY - RENEW_SERVING_BEFORE + DAY)
    renewed = renew(bundle, HOSTS, later)
    assert renewed.ca_bundle == bundle.ca_bundle and renewed.ca_key == bundle.ca_key
    assert renewed.cert != bundle.cert
    assert verifies(renewed, HOSTS[0], later)
    assert not_after(renewed.cert) > not_after(bundle.cert)


def test_other_hosts_get_a_new_serving_certificate() -> None:
    bundle = renew(None, HOSTS, T0)
    assert renewal_due(bundle, ["192.0.2.2"], T0)
    moved = renew(bundle, ["192.0.2.2"], T0)
    assert verifies(moved, "192.0.2.2", T0) and not verifies(moved, HOSTS[0], T0)


def test_a_ca_near_its_end_is_replaced_and_the_old_one_stays_trusted_until_it_expires() -> None:
    bundle = renew(None, HOSTS, T0)
    late = T0 + CA_VALIDITY - RENEW_CA_BEFORE + DAY
    rotated = renew(bundle, HOSTS, late)
    cas = x509.load_pem_x509_certificates(rotated.ca_bundle)
    assert len(cas) == 2, "the new CA beside the old one"
    assert rotated.ca_key != bundle.ca_key
    assert verifies(rotated, HOSTS[0], late)
    # A serving certificate of the old CA, still in use by a replica that has not reloaded, verifies too.
    old_serving = TLSBundle(ca_bundle=rotated.ca_bundle, ca_key=bundle.ca_key,
                            cert=issue(bundle.ca_bundle, bundle.ca_key, HOSTS, late)[0], key=b"")
    assert verifies(old_serving, HOSTS[0], late)
    # Once the old CA has expired, the next renewal drops it.
    after_old = T0 + CA_VALIDITY + DAY
    again = renew(rotated, HOSTS, after_old)
    assert len(x509.load_pem_x509_certificates(again.ca_bundle)) == 1


def test_a_serving_certificate_never_outlives_its_ca() -> None:
    ca_cert, ca_key = new_ca(T0)
    near_end = T0 + CA_VALIDITY - 10 * DAY
    cert, _ = issue(ca_cert, ca_key, HOSTS, near_end)
    assert not_after(cert) == not_after(ca_cert)


@pytest.mark.parametrize("field", ["ca_bundle", "ca_key", "cert", "key"])
def test_an_unreadable_bundle_is_made_anew(field: str) -> None:
    bundle = renew(None, HOSTS, T0)
    broken = TLSBundle(**{**bundle.__dict__, field: b"not a PEM"})
    assert renewal_due(broken, HOSTS, T0)
    fresh = renew(broken, HOSTS, T0)
    assert verifies(fresh, HOSTS[0], T0)


def test_a_serving_certificate_of_another_ca_is_replaced() -> None:
    one, other = renew(None, HOSTS, T0), renew(None, HOSTS, T0)
    mixed = TLSBundle(ca_bundle=one.ca_bundle, ca_key=one.ca_key, cert=other.cert, key=other.key)
    assert renewal_due(mixed, HOSTS, T0)
    assert verifies(renew(mixed, HOSTS, T0), HOSTS[0], T0)


def test_no_hosts_is_refused() -> None:
    ca_cert, ca_key = new_ca(T0)
    with pytest.raises(ValueError, match="at least one host"):
        issue(ca_cert, ca_key, [], T0)


def test_a_serving_key_that_does_not_match_its_certificate_is_replaced() -> None:
    one = renew(None, HOSTS, T0)
    other = renew(one, ["192.0.2.9"], T0)
    mismatched = TLSBundle(ca_bundle=one.ca_bundle, ca_key=one.ca_key, cert=one.cert, key=other.key)
    assert renewal_due(mismatched, HOSTS, T0)
    fixed = renew(mismatched, HOSTS, T0)
    assert fixed.ca_key == one.ca_key, "the CA is still good and kept"
