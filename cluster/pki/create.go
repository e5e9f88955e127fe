package pki

// CreateCA makes a new CA of o and writes it into dir as CAFile and
// CAKeyFile, refusing to replace existing files (pollux tls ca create).
func CreateCA(dir string, o CAOptions) (ca *CA, certPath, keyPath string, err error) {
	if ca, err = NewCA(o); err != nil {
		return nil, "", "", err
	}
	if certPath, keyPath, err = WriteCA(dir, ca); err != nil {
		return nil, "", "", err
	}
	return ca, certPath, keyPath, nil
}

// IssueTo signs a new certificate for req and writes it and its key into
// dir under CertFiles' names, refusing to replace existing files (pollux
// tls cert create).
func (ca *CA) IssueTo(dir string, req CertRequest) (is *Issued, certPath, keyPath string, err error) {
	if is, err = ca.Issue(req); err != nil {
		return nil, "", "", err
	}
	if certPath, keyPath, err = WriteIssued(dir, req.Identity, is); err != nil {
		return nil, "", "", err
	}
	return is, certPath, keyPath, nil
}
